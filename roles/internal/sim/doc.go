// Package sim is a simulated world for running a whole dfkv cluster (cache
// nodes, the MDS on its bbolt directory, clients) inside one test process,
// under virtual time and a seeded schedule of faults, so that a run is
// decided by its seed and a failing seed replays.
//
// The world has three parts, each a seam the product code already takes:
//
//   - Net, an in-memory network (the nodes' listeners, the clients' and
//     the nodes' dialers): latencies drawn from the run's seed and what is sent,
//     partitions that hold bytes until they heal, resets, slow hosts.
//   - Disk, the engines' filesystem (vfs.FS) over real files: crashes after
//     which a process's files fail, power cuts that undo unsynced writes
//     (torn or not) file by file, EIO and ENOSPC chosen by a hash of the
//     operation, slow I/O in virtual time.
//   - Time, which is Go's testing/synctest: inside its bubble time.Now,
//     timers and sleeps are virtual, and time moves only when every
//     goroutine of the cluster is blocked, so the instant of each network
//     delivery and each timer is decided by the run's seed, not by the machine.
//
// What synctest does not make deterministic is the order in which
// goroutines that are runnable at the same virtual instant run (nor map
// iteration or select, which Go randomizes). The world keeps such ties
// rare and harmless:
//
//   - every chunk of bytes is delivered at an instant of its own: the
//     latency is a nanosecond-resolution hash of the run's seed, the hosts, the
//     moment and the bytes, not of the connection, so two goroutines that
//     swap pooled connections from one run to the next still see their
//     bytes arrive when they did;
//   - what ends at a deadline (a dial into a partition, a read past its
//     deadline) ends a microsecond after it, off the round instants the
//     product's own tickers keep, and the harness draws every wait to the
//     nanosecond for the same reason;
//   - disk faults are chosen by the operation's file, length and moment,
//     not its offset (where an engine puts a value may depend on which
//     goroutine reached its allocator first), and a torn write is chosen
//     by its moment and bytes;
//   - each actor draws from a source of its own, seeded by the run's seed and
//     its name;
//   - the event log is written per actor and sorted by (time, actor,
//     sequence), and file offsets in the processes' log lines are masked.
//
// The cluster the tests build avoids the one source of ties the product
// has by design, an engine writing the items of one batch from several
// goroutines (the client sends one item per frame, the RAM tier flushes
// with one thread), since the order in which they reach the allocator
// decides where values land. The tests check that replays are exact by
// running a seed three times.
//
// Two things the world shows only indirectly:
//
//   - A lock held across disk or network I/O. A goroutine waiting for a
//     sync.Mutex is not durably blocked, so while it waits for a holder
//     asleep in a slow write virtual time stands still and the run hangs
//     rather than fails; go test's -timeout then prints every goroutine,
//     the waiter and the holder among them. Slow disks found two such
//     locks this way: the quota admission held one through the write it
//     admitted, and the RAM tier a key stripe through synchronous writes.
//   - Steps of the wall clock. synctest keeps one clock, so the world
//     cannot step wall time while monotonic time runs on, which is what
//     NTP or an operator's date does to a process. The product is immune
//     by construction instead: instants stay time.Time values, whose
//     monotonic reading every comparison uses, and TestNoWallClockArithmetic
//     (in the repository's root package) fails on any new conversion of an
//     instant to Unix time outside a short list of places that mean a date.
//
// The cluster, its workload, its invariants and the fault schedule are in
// this package's tests (go test ./roles/internal/sim); the flags
// -sim.seed, -sim.runs, -sim.first, -sim.duration and -sim.log replay a
// seed or soak many.
package sim
