// Package e2e holds dfkv's multi-process tests and nothing else: each
// builds the dfkv binary once (with -race when the tests run with it),
// starts real `dfkv server` and `dfkv mds` processes on loopback ports and
// temporary disk directories, and drives them with `dfkv smoke`, `ctl`,
// `bench`, the client library and signals (SIGTERM, SIGHUP, SIGKILL).
// They check what only a whole process shows: symlink dispatch, restarts
// that find every acknowledged block, crash recovery, descriptor
// exhaustion, signal handling and a cluster on a real etcd.
//
// Run them with
//
//	go test -race ./roles/e2e/
//
// They take a few minutes. The cluster test needs etcd on PATH
// (apt-get install etcd-server) and is skipped without it;
// DFKV_TEST_SIGKILLS=N sets how many times the crash test kills its node
// (3 by default):
//
//	DFKV_TEST_SIGKILLS=10 go test -run SIGKILLUnderLoad -v ./roles/e2e/
package e2e
