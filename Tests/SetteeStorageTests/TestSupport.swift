import Foundation
import Logging
import SetteeClusterMap
import SetteeCore
import SetteeTestSupport
import Synchronization

@testable import SetteeStorage

extension TemporaryDirectory {
    /// The bucket's SQLite file when the directory is a bucket's.
    var dataFile: String { path + "/data.sqlite" }

    /// A new directory holding a copy of this one's files: a bucket's files as a crash would leave them, when no one
    /// writes them meanwhile.
    func copy() throws -> TemporaryDirectory {
        let copy = TemporaryDirectory("storage")
        for name in try FileManager.default.contentsOfDirectory(atPath: path) {
            try FileManager.default.copyItem(atPath: path + "/" + name, toPath: copy.path + "/" + name)
        }
        return copy
    }
}

func testSettings(quotaMB: Int = 256, vbuckets: Int = 64) -> BucketSettings {
    BucketSettings(
        name: "test", uuid: "0123456789abcdef0123456789abcdef", ramQuotaMB: quotaMB, numVBuckets: vbuckets)
}

func testOptions() -> EngineOptions {
    var o = EngineOptions()
    o.flusherMaxDelay = 0.001
    o.expiryPagerInterval = 3600
    return o
}

func quietLogger() -> Logger {
    var l = Logger(label: "settee.storage.test")
    l.logLevel = .critical
    return l
}

func openEngine(
    _ dir: TemporaryDirectory, quotaMB: Int = 256, vbuckets: Int = 64, clock: any WallClock = SystemWallClock(),
    options: EngineOptions = testOptions()
) throws -> BucketEngine {
    try BucketEngine(
        settings: testSettings(quotaMB: quotaMB, vbuckets: vbuckets), directory: dir.path, clock: clock,
        options: options, logger: quietLogger())
}

func key(_ s: String) -> [UInt8] { Array(s.utf8) }

/// Opens the bucket in `dir`, sets `<prefix>0` ... with values `[i]`, and shuts it down: a file of `count` items.
func storeAndClose(_ dir: TemporaryDirectory, prefix: String, count: Int) throws {
    let e = try openEngine(dir)
    for i in 0..<count {
        let k = key("\(prefix)\(i)")
        _ = try e.store(.set, vbOf(k, e), k, value: [UInt8(i)], flags: 0, expiry: 0, datatype: .raw, cas: .zero)
    }
    e.shutdown()
}
func bytes(_ s: String) -> [UInt8] { Array(s.utf8) }

/// A JSON document of about `size` bytes that compresses like real documents do (repeated field names).
func jsonDoc(_ i: Int, size: Int = 1024) -> [UInt8] {
    var s = "{\"id\":\(i),\"type\":\"user\",\"name\":\"user-\(i)\",\"tags\":["
    var n = 0
    while s.utf8.count < size - 40 {
        s += "{\"k\":\"field-\(n)\",\"v\":\(i &* 31 &+ n)},"
        n += 1
    }
    s += "{}],\"pad\":\"\(String(repeating: "x", count: max(0, size - s.utf8.count - 12)))\"}"
    return Array(s.utf8)
}

/// Blocks until the engine reports `seqno` of `vb` persisted (or failed); nil on timeout.
func waitPersisted(_ e: BucketEngine, _ vb: VBucketID, _ seqno: SeqNo, timeout: Double = 10) -> Result<
    Void, EngineError
>? {
    let sem = DispatchSemaphore(value: 0)
    let out = Mutex<Result<Void, EngineError>?>(nil)
    e.waitForPersistence(vb, seqno) { r in
        out.withLock { $0 = r }
        sem.signal()
    }
    guard sem.wait(timeout: .now() + timeout) == .success else { return nil }
    return out.withLock { $0 }
}

/// Waits until every vBucket's persisted seqno reached its high seqno.
func waitAllPersisted(_ e: BucketEngine) throws {
    for i in 0..<e.settings.numVBuckets {
        let vb = VBucketID(UInt16(i))
        let info = e.seqnoInfo(vb)
        if info.highSeqno > info.persistedSeqno {
            guard case .success = waitPersisted(e, vb, info.highSeqno) else {
                throw EngineError.ioFailure("not persisted in time")
            }
        }
    }
}

/// Drops `k`'s value as the item pager does (clean, live, resident), for a test that needs this one evicted.
/// False when the item is not there, deleted, not resident or not persisted yet.
func evict(_ e: BucketEngine, _ vb: VBucketID, _ k: [UInt8]) -> Bool {
    e.core.vbuckets[vb.index].table.withLock { t in
        guard var item = t.items[DocKey(k)], !item.deleted, let value = item.value, !item.dirty else { return false }
        item.value = nil
        t.items[DocKey(k)] = item
        t.memUsed -= value.count
        t.nonResident += 1
        return true
    }
}

/// Polls `condition` every 10 ms for up to `timeout` seconds.
func eventually(timeout: Double = 10, _ condition: () -> Bool) -> Bool {
    let deadline = Date().addingTimeInterval(timeout)
    while Date() < deadline {
        if condition() { return true }
        usleep(10_000)
    }
    return condition()
}

func vbOf(_ k: [UInt8], _ e: BucketEngine) -> VBucketID {
    VBucketHash.vbucket(forKey: k, count: e.settings.numVBuckets)
}

/// The first key `prefix0`, `prefix1`, … that hashes to `vb` (`e`'s vBucket count).
func keyInVBucket(_ vb: VBucketID, _ e: BucketEngine, prefix: String) -> [UInt8] {
    var i = 0
    while vbOf(key("\(prefix)\(i)"), e) != vb { i += 1 }
    return key("\(prefix)\(i)")
}

/// Writes a live key `fence<n>` into every vBucket of `e`, so that none ends in a tombstone: the purger keeps the
/// tombstone at a vBucket's high seqno (ADR 0161), and a test that deletes last would otherwise keep one per vBucket.
/// Returns the number written (the vBucket count).
@discardableResult
func fenceEveryVBucket(_ e: BucketEngine) throws -> Int {
    for v in 0..<e.settings.numVBuckets {
        let vb = VBucketID(UInt16(v))
        _ = try e.store(
            .set, vb, keyInVBucket(vb, e, prefix: "fence"), value: bytes("f"), flags: 0, expiry: 0, datatype: .raw,
            cas: .zero)
    }
    return e.settings.numVBuckets
}

/// The first key `other0`, `other1`, … that does not hash to `vb`.
func keyInAnotherVBucket(than vb: VBucketID, _ e: BucketEngine) -> [UInt8] {
    var i = 0
    while vbOf(key("other\(i)"), e) == vb { i += 1 }
    return key("other\(i)")
}

/// `fetch` and wait for its completion.
func fetchSync(_ e: BucketEngine, _ vb: VBucketID, _ k: [UInt8]) -> Bool {
    let sem = DispatchSemaphore(value: 0)
    e.fetch(vb, k) { sem.signal() }
    return sem.wait(timeout: .now() + 10) == .success
}

/// Whether a persistence outcome is a success (Result<Void, _> is not Equatable).
func isOK(_ r: Result<Void, EngineError>?) -> Bool {
    if case .success? = r { return true }
    return false
}

/// Runs an engine call and captures its typed error.
func attempt<T>(_ body: () throws(EngineError) -> T) -> Result<T, EngineError> {
    do { return .success(try body()) } catch { return .failure(error) }
}
