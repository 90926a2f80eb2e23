//go:build !linux

// Package uring submits positioned reads and writes through io_uring,
// which only Linux has; elsewhere New fails and callers use pread/pwrite.
package uring

import (
	"errors"
	"sync/atomic"
)

// ErrClosed is returned by ReadAt and WriteAt after Close.
var ErrClosed = errors.New("uring: ring closed")

// Ring is never made outside Linux.
type Ring struct{ Submits, Ops atomic.Uint64 }

// New fails: io_uring is Linux only.
func New(uint32) (*Ring, error) { return nil, errors.New("uring: io_uring is Linux only") }

func (*Ring) ReadAt(int, []byte, int64) (int, error)  { return 0, ErrClosed }
func (*Ring) WriteAt(int, []byte, int64) (int, error) { return 0, ErrClosed }
func (*Ring) Close() error                            { return ErrClosed }
