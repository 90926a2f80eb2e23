package wire

import (
	"bytes"
	"errors"
	"testing"
)

func TestLeaseHelloAndWelcomeRoundTrip(t *testing.T) {
	h := LeaseHello{Epoch: EpochLease, Instance: 0xfeed}
	got, err := DecodeLeaseHello(AppendLeaseHello(nil, h))
	if err != nil || got != h {
		t.Fatalf("hello round trip: %+v, %v", got, err)
	}
	w := LeaseWelcome{Epoch: EpochLease, Status: StatusOK, LeaseMS: 2000, Instance: 7, ArenaBytes: 1 << 30, StagingBytes: 64 << 20, LeaseWords: 65536}
	gw, err := DecodeLeaseWelcome(AppendLeaseWelcome(nil, w))
	if err != nil || gw != w {
		t.Fatalf("welcome round trip: %+v, %v", gw, err)
	}
}

func TestLeaseHelloRefusals(t *testing.T) {
	old := AppendLeaseHello(nil, LeaseHello{Epoch: 6})
	tcp := AppendRequest(nil, &RequestHeader{Op: OpPing})
	reserved := AppendLeaseHello(nil, LeaseHello{})
	reserved[30] = 1
	for _, c := range []struct {
		name string
		b    []byte
		want Status
	}{
		{"old epoch", old, StatusEpochMismatch},
		{"TCP frame", tcp[:LeaseHelloLen], StatusEpochMismatch},
		{"reserved bytes", reserved, StatusInvalid},
		{"short", reserved[:10], StatusInvalid},
		{"garbage", bytes.Repeat([]byte{0xff}, 32), StatusInvalid},
	} {
		_, err := DecodeLeaseHello(c.b)
		var fe *FrameError
		if !errors.As(err, &fe) || fe.Status != c.want {
			t.Errorf("%s: %v, want %s", c.name, err, c.want)
		}
	}
	w := AppendLeaseWelcome(nil, LeaseWelcome{Epoch: 8})
	if _, err := DecodeLeaseWelcome(w); StatusOf(err) != StatusEpochMismatch {
		t.Errorf("welcome of another epoch: %v", err)
	}
}

func TestLeaseFrames(t *testing.T) {
	ok := []RequestHeader{
		{Op: OpLeaseGet, Length: 2, BodyLen: 2 * LeaseItemLen},
		{Op: OpLeaseGet, Key: BlockKey{Tenant: LeaseFlagPromote}, Offset: 3, Length: 1, BodyLen: 3*LeaseIDLen + LeaseItemLen},
		{Op: OpRelease, Offset: 4, BodyLen: 4 * LeaseIDLen},
		{Op: OpLeasePut, Length: 1, BodyLen: LeaseItemLen},
		{Op: OpShmInfo},
	}
	for _, h := range ok {
		if _, err := DecodeRequest(AppendRequest(nil, &h), testLimits); err != nil {
			t.Errorf("%+v refused: %v", h, err)
		}
	}
	bad := []RequestHeader{
		{Op: OpLeaseGet, Length: 0},                                                  // no items
		{Op: OpLeaseGet, Length: 1, BodyLen: LeaseItemLen + 1},                       // body does not fit
		{Op: OpLeaseGet, Key: BlockKey{Tenant: 2}, Length: 1, BodyLen: LeaseItemLen}, // unknown flag
		{Op: OpLeaseGet, Key: BlockKey{ID: [16]byte{1}}, Length: 1, BodyLen: LeaseItemLen},
		{Op: OpLeasePut, Key: BlockKey{Tenant: LeaseFlagPromote}, Length: 1, BodyLen: LeaseItemLen},
		{Op: OpRelease}, // nothing to release
		{Op: OpRelease, Offset: 1, Length: 1, BodyLen: LeaseIDLen + LeaseItemLen}, // items on a RELEASE
		{Op: OpRelease, Offset: testLimits.MaxBatchItems + 1, BodyLen: (testLimits.MaxBatchItems + 1) * LeaseIDLen},
		{Op: OpShmInfo, BodyLen: 1},
	}
	for _, h := range bad {
		if _, err := DecodeRequest(AppendRequest(nil, &h), testLimits); err == nil {
			t.Errorf("%+v accepted", h)
		}
	}
}

func TestLeaseRecordChecks(t *testing.T) {
	good := []LeaseRecord{
		{Status: StatusOK, Stored: 10, Kind: LeaseArena, Offset: 4096, Length: 10, Lease: 1<<32 | 1},
		{Status: StatusOK, Stored: 10, Kind: LeaseInline, Length: 10},
		{Status: StatusNotFound},
		{Status: StatusOK, Stored: 10},
	}
	for _, r := range good {
		b := AppendLeaseRecord(nil, r.Status, r.Stored, r.Kind, r.Offset, r.Length, r.Lease)
		if len(b) != LeaseRecordLen {
			t.Fatalf("record of %d bytes", len(b))
		}
		got, err := DecodeLeaseRecord(b)
		if err != nil || got != r {
			t.Errorf("%+v: %+v, %v", r, got, err)
		}
	}
	bad := []LeaseRecord{
		{Status: StatusNotFound, Kind: LeaseInline, Length: 3},     // bytes with a miss
		{Status: StatusOK, Kind: LeaseArena, Length: 3},            // a lease without an id
		{Status: StatusOK, Kind: LeaseInline, Length: 3, Lease: 5}, // an id without a lease
		{Status: StatusOK, Kind: 9, Length: 3},
		{Status: 99},
		{Status: StatusOK, Kind: LeaseNone, Length: 3},
		{Status: StatusOK, Kind: LeaseArena, Lease: 1}, // zero bytes leased
	}
	for _, r := range bad {
		if _, err := DecodeLeaseRecord(AppendLeaseRecord(nil, r.Status, r.Stored, r.Kind, r.Offset, r.Length, r.Lease)); err == nil {
			t.Errorf("%+v accepted", r)
		}
	}
}

// FuzzLeaseDecoders: the lease protocol's decoders never panic on any
// input, and what they accept re-encodes to the same bytes.
func FuzzLeaseDecoders(f *testing.F) {
	f.Add(AppendLeaseHello(nil, LeaseHello{Instance: 3}))
	f.Add(AppendLeaseWelcome(nil, LeaseWelcome{Status: StatusOK, ArenaBytes: 1 << 20}))
	f.Add(AppendLeaseRecord(nil, StatusOK, 5, LeaseArena, 0, 5, 1<<32|1))
	f.Fuzz(func(t *testing.T, b []byte) {
		if h, err := DecodeLeaseHello(b); err == nil && !bytes.Equal(AppendLeaseHello(nil, h), b[:LeaseHelloLen]) {
			t.Fatalf("hello %+v does not re-encode", h)
		}
		if w, err := DecodeLeaseWelcome(b); err == nil && !bytes.Equal(AppendLeaseWelcome(nil, w), b[:LeaseWelcomeLen]) {
			t.Fatalf("welcome %+v does not re-encode", w)
		}
		if len(b) >= LeaseRecordLen {
			if r, err := DecodeLeaseRecord(b); err == nil && !bytes.Equal(AppendLeaseRecord(nil, r.Status, r.Stored, r.Kind, r.Offset, r.Length, r.Lease), b[:LeaseRecordLen]) {
				t.Fatalf("record %+v does not re-encode", r)
			}
		}
	})
}
