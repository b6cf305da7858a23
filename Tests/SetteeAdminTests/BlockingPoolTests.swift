import Foundation
import NIOPosix
import SetteeCore
import SetteeRegistry
import Testing

/// Proves the admin and views servers' blocking pool is bounded: more concurrent blocking calls than it has
/// threads all complete, queued behind each other, and no more of them ever run at once than its threads
/// (the dispatch queues it replaced started a thread for every waiting call).
@Suite struct BlockingPoolTests {
    /// Counts calls running at the same moment and the most seen.
    final class Gauge: @unchecked Sendable {
        private let lock = NSLock()
        private var running = 0
        private(set) var most = 0
        private(set) var finished = 0

        func enter() {
            lock.withLock {
                running += 1
                most = max(most, running)
            }
        }

        func leave() {
            lock.withLock {
                running -= 1
                finished += 1
            }
        }

        var snapshot: (most: Int, finished: Int) { lock.withLock { (most, finished) } }
    }

    @Test func moreCallsThanThreadsAllCompleteAndNeverExceedTheBound() async throws {
        let threads = 3
        let pool = NIOThreadPool(numberOfThreads: threads)
        pool.start()
        let gauge = Gauge()
        let calls = threads * 8
        let results = await withTaskGroup(of: Int.self) { group in
            for i in 0..<calls {
                group.addTask {
                    await BlockingPool.run(on: pool) { () -> Int in
                        gauge.enter()
                        defer { gauge.leave() }
                        Thread.sleep(forTimeInterval: 0.02)  // a blocking call, held long enough to overlap
                        return i
                    }
                }
            }
            var all: [Int] = []
            for await r in group { all.append(r) }
            return all
        }
        try await pool.shutdownGracefully()
        #expect(results.sorted() == Array(0..<calls))
        #expect(gauge.snapshot.finished == calls)
        #expect(gauge.snapshot.most == threads)
    }

    @Test func errorsReachTheCaller() async throws {
        struct Refused: Error, Equatable {}
        await #expect(throws: Refused.self) {
            try await BlockingPool.run { () throws -> Int in throw Refused() }
        }
        let value = try await BlockingPool.run { () throws -> Int in 7 }
        #expect(value == 7)
    }

    @Test func theSharedPoolHasTheNamedSize() async {
        // As many calls as the limit, each waiting until all have started: they can only all finish if the
        // shared pool runs that many at once, and the gauge shows it never runs more.
        let gauge = Gauge()
        let all = Limits.blockingPoolThreads
        let started = NSCondition()
        nonisolated(unsafe) var count = 0
        await withTaskGroup(of: Void.self) { group in
            for _ in 0..<(all * 2) {
                group.addTask {
                    await BlockingPool.run {
                        gauge.enter()
                        defer { gauge.leave() }
                        started.lock()
                        count += 1
                        started.broadcast()
                        let deadline = Date(timeIntervalSinceNow: 5)
                        while count < all, started.wait(until: deadline) {}
                        started.unlock()
                        Thread.sleep(forTimeInterval: 0.01)
                    }
                }
            }
        }
        #expect(gauge.snapshot.finished == all * 2)
        #expect(gauge.snapshot.most == all)
    }
}
