//go:build ibverbs && linux && cgo

package rdma

// The libibverbs provider. It is compiled and vetted (go vet -tags ibverbs)
// but has never run in this repository's tests: the test machines have no
// RDMA device and no kernel RDMA, so every test runs the transport over
// the Fake. Known simplifications: GID index 0 is used on RoCE (a RoCE v2
// fabric may need another index), the path MTU is the port's active MTU,
// and the timeouts and retry counts are fixed.

/*
#cgo LDFLAGS: -libverbs
#include <infiniband/verbs.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

// The calls below are macros or static inline functions in verbs.h, or
// take unions and linked lists that Go cannot build conveniently.

static int dfkv_query_port(struct ibv_context *ctx, uint8_t port, int *state, uint16_t *lid, int *link, int *mtu) {
	struct ibv_port_attr a;
	memset(&a, 0, sizeof a);
	int rc = ibv_query_port(ctx, port, &a);
	if (rc) return rc;
	*state = a.state; *lid = a.lid; *link = a.link_layer; *mtu = a.active_mtu;
	return 0;
}

static int dfkv_query_gid(struct ibv_context *ctx, uint8_t port, int index, uint8_t *gid) {
	union ibv_gid g;
	int rc = ibv_query_gid(ctx, port, index, &g);
	if (rc == 0) memcpy(gid, g.raw, 16);
	return rc;
}

static struct ibv_mr *dfkv_reg_mr(struct ibv_pd *pd, uintptr_t addr, size_t len, int access) {
	return ibv_reg_mr(pd, (void *)addr, len, access);
}

static struct ibv_qp *dfkv_create_qp(struct ibv_pd *pd, struct ibv_cq *cq, int depth) {
	struct ibv_qp_init_attr a;
	memset(&a, 0, sizeof a);
	a.send_cq = cq;
	a.recv_cq = cq;
	a.qp_type = IBV_QPT_RC;
	a.sq_sig_all = 1;
	a.cap.max_send_wr = depth;
	a.cap.max_recv_wr = 1;
	a.cap.max_send_sge = 1;
	a.cap.max_recv_sge = 1;
	return ibv_create_qp(pd, &a);
}

static int dfkv_qp_init(struct ibv_qp *qp, uint8_t port) {
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_INIT;
	a.pkey_index = 0;
	a.port_num = port;
	a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE;
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
}

static int dfkv_qp_rtr(struct ibv_qp *qp, uint8_t port, int mtu, uint32_t qpn, uint32_t psn, uint16_t lid, uint8_t *gid, int global, int rd_atom) {
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = mtu;
	a.dest_qp_num = qpn;
	a.rq_psn = psn;
	a.max_dest_rd_atomic = rd_atom;
	a.min_rnr_timer = 12;
	a.ah_attr.dlid = lid;
	a.ah_attr.sl = 0;
	a.ah_attr.port_num = port;
	if (global) {
		a.ah_attr.is_global = 1;
		memcpy(a.ah_attr.grh.dgid.raw, gid, 16);
		a.ah_attr.grh.sgid_index = 0;
		a.ah_attr.grh.hop_limit = 64;
	}
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
		IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
}

static int dfkv_qp_rts(struct ibv_qp *qp, uint32_t psn, int rd_atom) {
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.sq_psn = psn;
	a.max_rd_atomic = rd_atom;
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
		IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
}

static int dfkv_post(struct ibv_qp *qp, uint64_t id, int write, int fence, uintptr_t laddr, uint32_t len, uint32_t lkey, uint64_t raddr, uint32_t rkey) {
	struct ibv_sge sge;
	struct ibv_send_wr wr, *bad = NULL;
	memset(&wr, 0, sizeof wr);
	sge.addr = laddr;
	sge.length = len;
	sge.lkey = lkey;
	wr.wr_id = id;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = write ? IBV_WR_RDMA_WRITE : IBV_WR_RDMA_READ;
	wr.send_flags = IBV_SEND_SIGNALED | (fence ? IBV_SEND_FENCE : 0);
	wr.wr.rdma.remote_addr = raddr;
	wr.wr.rdma.rkey = rkey;
	return ibv_post_send(qp, &wr, &bad);
}

static int dfkv_poll(struct ibv_cq *cq, int n, uint64_t *ids, int *status, int *write) {
	struct ibv_wc wc[32];
	if (n > 32) n = 32;
	int got = ibv_poll_cq(cq, n, wc);
	for (int i = 0; i < got; i++) {
		ids[i] = wc[i].wr_id;
		status[i] = wc[i].status;
		write[i] = wc[i].opcode == IBV_WC_RDMA_WRITE;
	}
	return got;
}
*/
import "C"

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"sync"
	"unsafe"
)

// Verbs is the libibverbs Provider.
type Verbs struct{}

func defaultProvider() (Provider, error) { return Verbs{}, nil }

// Open implements Provider: the named device (or, for "", the first one
// with an ACTIVE port) and its first ACTIVE port.
func (Verbs) Open(name string) (Device, error) {
	var n C.int
	list, errno := C.ibv_get_device_list(&n)
	if list == nil {
		return nil, fmt.Errorf("no RDMA device: ibv_get_device_list failed (%v); is the kernel's RDMA support (ib_uverbs) loaded?", errno)
	}
	defer C.ibv_free_device_list(list)
	if n == 0 {
		return nil, errors.New("no RDMA device: ibv_get_device_list found none")
	}
	devs := unsafe.Slice(list, int(n))
	var seen, why []string
	for _, dev := range devs {
		dn := C.GoString(C.ibv_get_device_name(dev))
		seen = append(seen, dn)
		if name != "" && dn != name {
			continue
		}
		d, err := openDevice(dev, dn)
		if err == nil {
			return d, nil
		}
		why = append(why, err.Error())
		if name != "" {
			break
		}
	}
	if len(why) == 0 {
		return nil, fmt.Errorf("no RDMA device named %q (there are %s)", name, strings.Join(seen, ", "))
	}
	return nil, fmt.Errorf("no usable RDMA device: %s", strings.Join(why, "; "))
}

type ibvDevice struct {
	ctx    *C.struct_ibv_context
	name   string
	port   C.uint8_t
	lid    uint16
	gid    [16]byte
	global bool // RoCE: address by GID
	mtu    C.int
	rdAtom C.int // READs one QP may have in flight at the responder
}

func openDevice(dev *C.struct_ibv_device, name string) (*ibvDevice, error) {
	ctx, errno := C.ibv_open_device(dev)
	if ctx == nil {
		return nil, fmt.Errorf("%s: ibv_open_device: %v", name, errno)
	}
	var attr C.struct_ibv_device_attr
	if rc := C.ibv_query_device(ctx, &attr); rc != 0 {
		C.ibv_close_device(ctx)
		return nil, fmt.Errorf("%s: ibv_query_device: errno %d", name, rc)
	}
	d := &ibvDevice{ctx: ctx, name: name, rdAtom: C.int(min(16, int(attr.max_qp_rd_atom), int(attr.max_qp_init_rd_atom)))}
	for p := 1; p <= int(attr.phys_port_cnt); p++ {
		var state, link, mtu C.int
		var lid C.uint16_t
		if C.dfkv_query_port(ctx, C.uint8_t(p), &state, &lid, &link, &mtu) != 0 || state != C.IBV_PORT_ACTIVE {
			continue
		}
		d.port, d.lid, d.mtu = C.uint8_t(p), uint16(lid), mtu
		d.global = link == C.IBV_LINK_LAYER_ETHERNET
		if rc := C.dfkv_query_gid(ctx, d.port, 0, (*C.uint8_t)(unsafe.Pointer(&d.gid[0]))); rc != 0 && d.global {
			C.ibv_close_device(ctx)
			return nil, fmt.Errorf("%s port %d: ibv_query_gid: errno %d", name, p, rc)
		}
		return d, nil
	}
	C.ibv_close_device(ctx)
	return nil, fmt.Errorf("%s: no ACTIVE port", name)
}

func (d *ibvDevice) Name() string { return d.name }

func (d *ibvDevice) AllocPD() (PD, error) {
	pd, errno := C.ibv_alloc_pd(d.ctx)
	if pd == nil {
		return nil, fmt.Errorf("ibv_alloc_pd on %s: %v", d.name, errno)
	}
	return &ibvPD{d: d, pd: pd}, nil
}

func (d *ibvDevice) Close() error {
	if rc := C.ibv_close_device(d.ctx); rc != 0 {
		return fmt.Errorf("ibv_close_device %s: errno %d", d.name, rc)
	}
	return nil
}

type ibvPD struct {
	d  *ibvDevice
	pd *C.struct_ibv_pd
}

// Register implements PD. buf must be memory outside the Go heap (the
// transport maps its regions; the arena is a mapping too).
func (p *ibvPD) Register(buf []byte, access Access) (MR, error) {
	if len(buf) == 0 {
		return nil, errors.New("registering an empty region")
	}
	var flags C.int
	if access&AccessLocalWrite != 0 || access&AccessRemoteWrite != 0 {
		flags |= C.IBV_ACCESS_LOCAL_WRITE // remote write requires local write
	}
	if access&AccessRemoteRead != 0 {
		flags |= C.IBV_ACCESS_REMOTE_READ
	}
	if access&AccessRemoteWrite != 0 {
		flags |= C.IBV_ACCESS_REMOTE_WRITE
	}
	addr := uintptr(unsafe.Pointer(unsafe.SliceData(buf)))
	mr, errno := C.dfkv_reg_mr(p.pd, C.uintptr_t(addr), C.size_t(len(buf)), flags)
	if mr == nil {
		return nil, fmt.Errorf("ibv_reg_mr of %d bytes: %v (is RLIMIT_MEMLOCK large enough?)", len(buf), errno)
	}
	return &ibvMR{mr: mr, addr: uint64(addr), n: uint64(len(buf))}, nil
}

func (p *ibvPD) CreateQP(depth int) (QP, error) {
	cq, errno := C.ibv_create_cq(p.d.ctx, C.int(depth), nil, nil, 0)
	if cq == nil {
		return nil, fmt.Errorf("ibv_create_cq of %d entries: %v", depth, errno)
	}
	qp, errno := C.dfkv_create_qp(p.pd, cq, C.int(depth))
	if qp == nil {
		C.ibv_destroy_cq(cq)
		return nil, fmt.Errorf("ibv_create_qp (RC, depth %d): %v", depth, errno)
	}
	if rc := C.dfkv_qp_init(qp, p.d.port); rc != 0 {
		C.ibv_destroy_qp(qp)
		C.ibv_destroy_cq(cq)
		return nil, fmt.Errorf("queue pair to INIT: errno %d", rc)
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	return &ibvQP{d: p.d, qp: qp, cq: cq, psn: binary.LittleEndian.Uint32(b[:]) & 0xffffff}, nil
}

func (p *ibvPD) Close() error {
	if rc := C.ibv_dealloc_pd(p.pd); rc != 0 {
		return fmt.Errorf("ibv_dealloc_pd: errno %d", rc)
	}
	return nil
}

type ibvMR struct {
	mr   *C.struct_ibv_mr
	addr uint64
	n    uint64
}

func (m *ibvMR) Addr() uint64 { return m.addr }
func (m *ibvMR) Len() uint64  { return m.n }
func (m *ibvMR) LKey() uint32 { return uint32(m.mr.lkey) }
func (m *ibvMR) RKey() uint32 { return uint32(m.mr.rkey) }

func (m *ibvMR) Deregister() error {
	if rc := C.ibv_dereg_mr(m.mr); rc != 0 {
		return fmt.Errorf("ibv_dereg_mr: errno %d", rc)
	}
	return nil
}

type ibvQP struct {
	d      *ibvDevice
	qp     *C.struct_ibv_qp
	cq     *C.struct_ibv_cq
	psn    uint32
	mu     sync.Mutex // Close against Post and Poll
	closed bool
	ids    [32]C.uint64_t
	status [32]C.int
	write  [32]C.int
}

func (q *ibvQP) Endpoint() Endpoint {
	return Endpoint{QPN: uint32(q.qp.qp_num), PSN: q.psn, LID: q.d.lid, GID: q.d.gid}
}

func (q *ibvQP) Connect(r Endpoint) error {
	gid := r.GID
	global := C.int(0)
	if q.d.global {
		global = 1
	}
	if rc := C.dfkv_qp_rtr(q.qp, q.d.port, q.d.mtu, C.uint32_t(r.QPN), C.uint32_t(r.PSN), C.uint16_t(r.LID),
		(*C.uint8_t)(unsafe.Pointer(&gid[0])), global, q.d.rdAtom); rc != 0 {
		return fmt.Errorf("queue pair to RTR (peer QP %#x, LID %d): errno %d", r.QPN, r.LID, rc)
	}
	if rc := C.dfkv_qp_rts(q.qp, C.uint32_t(q.psn), q.d.rdAtom); rc != 0 {
		return fmt.Errorf("queue pair to RTS: errno %d", rc)
	}
	return nil
}

func (q *ibvQP) Post(wr WorkRequest) error {
	if len(wr.Local) == 0 || len(wr.Local) > 1<<31 {
		return fmt.Errorf("work request of %d bytes", len(wr.Local))
	}
	write := C.int(0)
	if wr.Op == OpWrite {
		write = 1
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return errors.New("post on a closed queue pair")
	}
	laddr := uintptr(unsafe.Pointer(unsafe.SliceData(wr.Local)))
	fence := C.int(0)
	if wr.Fence {
		fence = 1
	}
	if rc := C.dfkv_post(q.qp, C.uint64_t(wr.ID), write, fence, C.uintptr_t(laddr), C.uint32_t(len(wr.Local)), C.uint32_t(wr.LKey),
		C.uint64_t(wr.Remote), C.uint32_t(wr.RKey)); rc != 0 {
		return fmt.Errorf("ibv_post_send: errno %d", rc)
	}
	return nil
}

func (q *ibvQP) Poll(dst []Completion) (int, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return 0, errors.New("poll on a closed queue pair")
	}
	n := C.dfkv_poll(q.cq, C.int(min(len(dst), len(q.ids))), &q.ids[0], &q.status[0], &q.write[0])
	if n < 0 {
		return 0, fmt.Errorf("ibv_poll_cq: %d", n)
	}
	for i := range int(n) {
		op := OpRead
		if q.write[i] != 0 {
			op = OpWrite
		}
		dst[i] = Completion{ID: uint64(q.ids[i]), Op: op, Status: wcStatus(q.status[i])}
	}
	return int(n), nil
}

func wcStatus(s C.int) WCStatus {
	switch s {
	case C.IBV_WC_SUCCESS:
		return WCSuccess
	case C.IBV_WC_LOC_PROT_ERR:
		return WCLocalProtection
	case C.IBV_WC_REM_ACCESS_ERR:
		return WCRemoteAccess
	case C.IBV_WC_WR_FLUSH_ERR:
		return WCFlushed
	case C.IBV_WC_RETRY_EXC_ERR:
		return WCRetryExceeded
	}
	return WCOther
}

func (q *ibvQP) Close() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return nil
	}
	q.closed = true
	rc1 := C.ibv_destroy_qp(q.qp)
	rc2 := C.ibv_destroy_cq(q.cq)
	if rc1 != 0 || rc2 != 0 {
		return fmt.Errorf("destroying the queue pair: errno %d, %d", rc1, rc2)
	}
	return nil
}
