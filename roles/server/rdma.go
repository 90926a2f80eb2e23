package server

import (
	"fmt"
	"os"

	"github.com/dfkv/dfkv/rdma"
	"github.com/dfkv/dfkv/wire"
	"github.com/dfkv/dfkv/wire/shm"
)

// serveRDMA hands a connection whose first byte is the lease epoch (an
// RDMA client's bootstrap frame) to the RDMA transport, which serves it
// until it ends; a node without RDMA refuses it with the reason, as a
// lease welcome the client can read.
func (c *conn) serveRDMA() {
	if c.s.opts.RDMA == nil {
		c.s.stats.frameErrors.Add(1)
		_ = shm.SendRefusal(c.nc, wire.StatusUnsupported, fmt.Sprintf("this node does not serve RDMA: start it with %s=1, built with -tags ibverbs on a host with an RDMA device", rdma.EnvSwitch))
		return
	}
	c.returnScratch()
	c.mu.Lock()
	c.rdma = true
	c.mu.Unlock()
	c.s.opts.RDMA.ServeConn(c.nc, c.br)
}

// startRDMA makes the RDMA transport when DFKV_RDMA asks for it (the
// configuration already refused a build or host that cannot have it), or
// when a test injects a verbs provider.
func (n *node) startRDMA() (*rdma.Node, error) {
	prov := n.deps.RDMAProvider
	st, err := rdma.FromEnv(os.LookupEnv)
	if err != nil {
		return nil, err
	}
	if !st.Enabled && prov == nil {
		return nil, nil
	}
	if n.tls != nil {
		return nil, fmt.Errorf("%s with server.tls_cert: the RDMA bootstrap and transfers would bypass TLS; turn RDMA off on a node that serves TLS", rdma.EnvSwitch)
	}
	if n.creds != nil {
		return nil, fmt.Errorf("%s with server.credentials_file: an RDMA client reads the RAM arena one-sided, which no credential can confine to its tenants; turn RDMA off on a node that requires credentials", rdma.EnvSwitch)
	}
	opts := rdma.NodeOptions{Provider: prov, Device: st.Device, Engine: n.eng, LeaseTTL: n.sc.Lease, LeaseMax: n.sc.LeaseMax,
		StagingBytes: n.sc.ShmStagingBytes, MaxBlockBytes: n.sc.MaxBlockBytes, MaxBatchItems: n.sc.MaxBatchItems, Logger: n.log}
	if n.tier != nil {
		opts.Arena = n.tier
	}
	rn, err := rdma.NewNode(nil, opts)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", rdma.EnvSwitch, err)
	}
	n.closers.add(rn.Close)
	n.log.Info("RDMA transport on: clients bootstrap on the data port", "device", st.Device, "arena", n.tier != nil)
	return rn, nil
}
