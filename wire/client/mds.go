package client

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"github.com/dfkv/dfkv/wire"
)

// MDSClient speaks the MDS control protocol (wire/mds.go) to one of
// several MDS addresses. Control traffic is a few requests per second per
// process, so each call dials a fresh connection; a failing address is
// skipped in favour of the next, and the last address that answered is
// tried first next time.
type MDSClient struct {
	addrs   []string
	group   string
	dialer  Dialer
	timeout time.Duration
	token   string // sent with each request (SetToken); never logged

	mu   sync.Mutex
	next int
}

// NewMDSClient validates the group and addresses. It does not connect.
func NewMDSClient(addrs []string, group string, dialer Dialer, timeout time.Duration) (*MDSClient, error) {
	if err := wire.ValidateGroup(group); err != nil {
		return nil, err
	}
	if len(addrs) == 0 {
		return nil, fmt.Errorf("no MDS addresses: %w", wire.StatusInvalid)
	}
	for _, a := range addrs {
		if _, _, err := net.SplitHostPort(a); err != nil {
			return nil, fmt.Errorf("MDS address %q is not host:port: %v: %w", a, err, wire.StatusInvalid)
		}
	}
	if dialer == nil {
		dialer = &net.Dialer{}
	}
	if timeout <= 0 {
		timeout = 3 * time.Second
	}
	return &MDSClient{addrs: append([]string(nil), addrs...), group: group, dialer: dialer, timeout: timeout}, nil
}

// Group is the group this client speaks for.
func (m *MDSClient) Group() string { return m.group }

// SetToken sets the token sent with every request, for an MDS that
// requires credentials. Call it before the client is used.
func (m *MDSClient) SetToken(token string) { m.token = token }

// Register adds or refreshes info in the directory and returns the reply
// (epoch and the heartbeat TTL the node must keep).
func (m *MDSClient) Register(ctx context.Context, info wire.MemberInfo) (wire.MDSReply, error) {
	var rep wire.MDSReply
	_, err := m.call(ctx, wire.OpMDSRegister, 0, wire.MDSRequest{Group: m.group, Member: &info, Token: m.token}, &rep)
	return rep, err
}

// Heartbeat renews id and returns the reply: the epoch and, from an MDS
// that says it, the heartbeat TTL now in force (an MDS restarted with
// another TTL tells its nodes at their next heartbeat). An error wrapping
// wire.StatusNotFound means the directory no longer holds it: register
// again.
func (m *MDSClient) Heartbeat(ctx context.Context, id string) (wire.MDSReply, error) {
	var rep wire.MDSReply
	epoch, err := m.call(ctx, wire.OpMDSHeartbeat, 0, wire.MDSRequest{Group: m.group, ID: id, Token: m.token}, &rep)
	if rep.Epoch == 0 {
		rep.Epoch = epoch
	}
	return rep, err
}

// Deregister removes id (a node stopping gracefully).
func (m *MDSClient) Deregister(ctx context.Context, id string) error {
	return m.DeregisterAt(ctx, id, "")
}

// DeregisterAt removes member id if the MDS lists it at addr (NOT_FOUND
// otherwise: another node holds the id now); addr "" is not checked.
func (m *MDSClient) DeregisterAt(ctx context.Context, id, addr string) error {
	_, err := m.call(ctx, wire.OpMDSDeregister, 0, wire.MDSRequest{Group: m.group, ID: id, Addr: addr, Token: m.token}, nil)
	return err
}

// Members returns the group's members. When the directory's epoch equals
// known, the MDS answers "unchanged" and changed is false.
func (m *MDSClient) Members(ctx context.Context, known uint64) (epoch uint64, members []wire.MemberInfo, changed bool, err error) {
	var rep wire.MDSReply
	rep.Epoch = known
	epoch, err = m.call(ctx, wire.OpMDSMembers, known, wire.MDSRequest{Group: m.group, Token: m.token}, &rep)
	if err != nil {
		return 0, nil, false, err
	}
	if known != 0 && epoch == known {
		return epoch, nil, false, nil
	}
	return epoch, rep.Members, true, nil
}

// call tries each address once, starting with the last one that worked.
// An address that takes the connection and never answers (a stopped
// process, a black-holed host) must not use the whole call: once it has
// had its share of the time left, the next address is asked too, while
// the first may still answer (MDS processes sharing a slow etcd answer
// slowly, all of them), and the first answer wins. An address that fails
// fast is followed at once.
func (m *MDSClient) call(ctx context.Context, op wire.Op, known uint64, req wire.MDSRequest, rep *wire.MDSReply) (uint64, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return 0, err
	}
	m.mu.Lock()
	start := m.next
	m.mu.Unlock()
	type result struct {
		idx   int
		epoch uint64
		err   error
		final bool
		rep   wire.MDSReply
	}
	n := len(m.addrs)
	results := make(chan result, n)
	actx, cancel := context.WithCancel(ctx)
	launched, pending := 0, 0
	defer func() {
		// End the attempts still waiting (their connections' deadlines
		// are cut) and wait for them: a call leaves nothing running.
		cancel()
		for ; pending > 0; pending-- {
			<-results
		}
	}()
	launch := func() {
		idx := (start + launched) % n
		launched++
		go func() {
			r := result{idx: idx}
			var rp *wire.MDSReply
			if rep != nil {
				rp = &r.rep
			}
			r.epoch, r.err, r.final = m.callOne(actx, m.addrs[idx], op, known, body, rp)
			results <- r
		}()
	}
	launch()
	pending = 1
	var errs []error
	var refusal *result // a final error, held while an earlier attempt may still succeed
	win := func(r *result) (uint64, error) {
		m.mu.Lock()
		m.next = r.idx
		m.mu.Unlock()
		if rep != nil {
			*rep = r.rep
		}
		return r.epoch, r.err
	}
	for pending > 0 {
		var hedge <-chan time.Time
		if d, ok := ctx.Deadline(); ok && launched < n && refusal == nil {
			t := time.NewTimer(time.Until(d) / time.Duration(n-launched+1))
			defer t.Stop()
			hedge = t.C
		}
		select {
		case r := <-results:
			pending--
			if r.err == nil {
				return win(&r)
			}
			if r.final {
				// The MDS's own answer, which another would give too; but
				// an attempt still running may have done what this one
				// refuses (a DEREGISTER whose delete landed before its
				// slow answer: the next MDS says NOT_FOUND), so its
				// answer is waited for first.
				if refusal == nil {
					refusal = &r
				}
				continue
			}
			errs = append(errs, r.err)
			if launched < n && ctx.Err() == nil && refusal == nil {
				launch()
				pending++
			}
		case <-hedge:
			if ctx.Err() == nil {
				launch()
				pending++
			}
		}
	}
	if refusal != nil {
		return win(refusal)
	}
	for _, err := range errs {
		if errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, context.DeadlineExceeded) {
			// An MDS may have done what was asked and answered late (a
			// REGISTER behind a slow etcd): say the call timed out, so the
			// caller can tell that from one no MDS received.
			return 0, fmt.Errorf("no MDS answered (%v): %w: %w", errs, wire.StatusUnavailable, os.ErrDeadlineExceeded)
		}
	}
	return 0, fmt.Errorf("no MDS answered (%v): %w", errs, wire.StatusUnavailable)
}

// callOne runs one exchange. final reports an answer from the MDS itself
// (a status), which another MDS would give too, so no other is tried.
func (m *MDSClient) callOne(ctx context.Context, addr string, op wire.Op, known uint64, body []byte, rep *wire.MDSReply) (epoch uint64, err error, final bool) {
	deadline := time.Now().Add(m.timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	dctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	nc, err := m.dialer.DialContext(dctx, "tcp", addr)
	if err != nil {
		return 0, fmt.Errorf("MDS %s: %v", addr, err), false // %v: a dial that timed out delivered nothing
	}
	defer nc.Close()
	_ = nc.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { _ = nc.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	msg := append(wire.AppendMDSRequest(nil, op, known, len(body)), body...)
	if _, err := nc.Write(msg); err != nil {
		return 0, fmt.Errorf("MDS %s: %w", addr, err), false
	}
	br := bufio.NewReader(nc)
	var hb [wire.ResponsePrefixLen]byte
	if _, err := io.ReadFull(br, hb[:]); err != nil {
		return 0, fmt.Errorf("MDS %s: %w", addr, err), false
	}
	h, err := wire.DecodeMDSResponse(hb[:])
	if err != nil {
		return 0, fmt.Errorf("MDS %s: %w", addr, err), true
	}
	data := make([]byte, h.BodyLen)
	if _, err := io.ReadFull(br, data); err != nil {
		return 0, fmt.Errorf("MDS %s: %w", addr, err), false
	}
	if h.Status != wire.StatusOK {
		// An MDS whose backend is down says UNAVAILABLE; another MDS
		// may still reach it, so that one answer is not final.
		final := h.Status != wire.StatusUnavailable
		return h.Stored, fmt.Errorf("MDS %s: %w", addr, &wire.StatusError{Status: h.Status, Message: string(data)}), final
	}
	if rep != nil && len(data) > 0 {
		if err := json.Unmarshal(data, rep); err != nil {
			return 0, fmt.Errorf("MDS %s: unreadable reply: %v: %w", addr, err, wire.StatusInvalid), true
		}
	}
	return h.Stored, nil, true
}
