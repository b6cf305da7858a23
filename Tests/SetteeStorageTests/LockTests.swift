import SetteeCore
import SetteeTestSupport
import Testing

@testable import SetteeStorage

/// The engine error a call threw, nil if it succeeded.
private func failure<T>(_ body: () throws(EngineError) -> T) -> EngineError? {
    do {
        _ = try body()
        return nil
    } catch { return error }
}

@Suite(.onTestThreads) struct LockTests {
    /// Proves GET_AND_LOCK semantics in the engine: the lock CAS differs from the document's CAS, a
    /// second lock is refused, the wrong CAS neither unlocks nor mutates, the lock CAS mutates and
    /// releases the lock, and UNLOCK of an unlocked document is refused (NOT_LOCKED upstairs).
    @Test func lockCASGuardsTheDocument() throws {
        let dir = TemporaryDirectory("storage")
        let e = try openEngine(dir)
        let k = key("locked")
        let vb = vbOf(k, e)
        let stored = try e.store(
            .set, vb, k, value: bytes("1"), flags: 0, expiry: 0, datatype: .json, cas: CAS(0))
        let locked = try e.getAndLock(vb, k, lockSeconds: 10)
        #expect(locked.meta.cas != stored.cas && locked.value == bytes("1"))
        #expect(e.lockCAS(vb, k) == locked.meta.cas && BucketEngine.mayHaveLocks)
        let secondLock = failure { () throws(EngineError) in try e.getAndLock(vb, k, lockSeconds: 10) }
        #expect(secondLock == .locked)
        let wrongCASWrite = failure { () throws(EngineError) in try e.unlock(vb, k, cas: stored.cas) }
        #expect(wrongCASWrite == .locked)
        let missing = failure { () throws(EngineError) in
            try e.store(.replace, vb, k, value: bytes("2"), flags: 0, expiry: 0, datatype: .json, cas: stored.cas)
        }
        #expect(missing == .keyExists)
        _ = try e.store(
            .replace, vb, k, value: bytes("3"), flags: 0, expiry: 0, datatype: .json, cas: locked.meta.cas)
        #expect(e.lockCAS(vb, k) == nil)
        #expect(try e.get(vb, k).value == bytes("3"))
        let f17357 = failure { () throws(EngineError) in try e.unlock(vb, k, cas: locked.meta.cas) }
        #expect(f17357 == .temporaryFailure)

        let again = try e.getAndLock(vb, k, lockSeconds: 10)
        try e.unlock(vb, k, cas: again.meta.cas)
        #expect(e.lockCAS(vb, k) == nil)
        let f50609 = failure { () throws(EngineError) in try e.getAndLock(vb, key("missing"), lockSeconds: 1) }
        #expect(f50609 == .keyNotFound)
    }

    /// Proves lock timeouts: a lock lapses after its time, 0 and anything over 30 s mean 15 s.
    @Test func locksLapse() throws {
        let dir = TemporaryDirectory("storage")
        let clock = ManualWallClock()
        let e = try openEngine(dir, clock: clock)
        let k = key("lapse")
        let vb = vbOf(k, e)
        _ = try e.store(.set, vb, k, value: bytes("1"), flags: 0, expiry: 0, datatype: .json, cas: CAS(0))
        _ = try e.getAndLock(vb, k, lockSeconds: 2)
        clock.advance(seconds: 1)
        #expect(e.lockCAS(vb, k) != nil)
        clock.advance(seconds: 1.5)
        #expect(e.lockCAS(vb, k) == nil)
        for (asked, effective) in [(0, 15), (31, 15), (30, 30)] {
            #expect(LockTimeout.effective(UInt32(asked)) == UInt32(effective))
        }
        _ = try e.getAndLock(vb, k, lockSeconds: 0)
        clock.advance(seconds: 14)
        #expect(e.lockCAS(vb, k) != nil)
        clock.advance(seconds: 2)
        #expect(e.lockCAS(vb, k) == nil)
    }
}
