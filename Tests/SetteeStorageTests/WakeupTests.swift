import CoreFoundation
import Foundation
import SetteeTestSupport
import Testing

@testable import SetteeStorage

/// Timed waits cannot trap, whatever the caller computed (stop 54: a flusher window's deadline passed between its
/// check and its wait, the wait became a wrapped 1.8e10 s, and `Int(seconds * 1e9)` crashed the node under load).
@Suite(.onTestThreads) struct WakeupTests {
    @Test func deadlinesClampWhatTheyAreGiven() {
        let now = timespec(tv_sec: 1_000, tv_nsec: 999_999_999)
        let wrapped = Double(UInt64(5) &- 10) / 1e9
        for (seconds, expected) in [
            (wrapped, Wakeup.maxWaitSeconds), (.infinity, Wakeup.maxWaitSeconds), (-3, 0), (.nan, 0), (0.25, 0.25),
        ] {
            let d = Wakeup.deadline(after: seconds, from: now)
            #expect((0..<1_000_000_000).contains(d.tv_nsec))
            let waited = Double(d.tv_sec - now.tv_sec) + Double(d.tv_nsec - now.tv_nsec) / 1e9
            #expect(abs(waited - expected) < 1e-6, "\(seconds) s waits \(waited) s")
        }
    }

    /// The flusher's deadlines are monotonic instants: one that has passed (or is now) is no wait, a later one waits
    /// until it.
    @Test func aPassedDeadlineIsNoWait() {
        let wakeup = Wakeup()
        func waited(until deadline: UInt64) -> Double {
            let start = monotonicNanos()
            wakeup.locked { wakeup.waitLocked(untilMonotonicNanos: deadline) }
            return Double(monotonicNanos() - start) / 1e9
        }
        let now = monotonicNanos()
        #expect(waited(until: now - 5_000_000_000) < 0.1)
        #expect(waited(until: monotonicNanos()) < 0.1)
        #expect(waited(until: 5) < 0.1)
        #expect(waited(until: monotonicNanos() + 300_000_000) >= 0.29)
    }

    /// The exact value that crashed the node: the wait is a long one (clamped), and a broadcast ends it.
    @Test func theWrappedWaitOfTheCrashWaitsUntilWoken() {
        let wakeup = Wakeup()
        let done = Latch()
        Thread.detachNewThread {
            wakeup.locked { wakeup.waitLocked(seconds: Double(UInt64(5) &- 10) / 1e9) }
            done.open()
        }
        let start = Date()
        while !done.isOpen && Date().timeIntervalSince(start) < 10 {
            usleep(50_000)
            wakeup.broadcast()
        }
        #expect(done.isOpen)
    }
}
