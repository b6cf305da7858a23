import Foundation
import SetteeCore
import SetteeTestSupport
import Testing

@testable import SetteeStorage

/// Bytes of resident memory per resident item (growth of `/proc/self/statm`'s resident pages), for
/// the values `benchmarks/kvload.py` writes (13-byte keys, 985-byte JSON): the item and its table alone, then the
/// whole engine with every item flushed. Slow (1 GB, ~1 min): runs only with SETTEE_MEMORY_PROBE=1 (ADR 0048).
@Suite(.serialized, .enabled(if: ProcessInfo.processInfo.environment["SETTEE_MEMORY_PROBE"] != nil), .onTestThreads)
struct MemoryProbeTests {
    static let items = 300_000
    static let vbuckets = 1024

    static func key(_ i: Int) -> [UInt8] { Array(String(format: "doc::%08d", i).utf8) }
    static func value(_ i: Int) -> [UInt8] {
        Array("{\"n\":\(i),\"type\":\"image\",\"pad\":\"\(String(repeating: "x", count: 964))\"}".utf8)
    }
    static func heapInUse() -> Int {
        let statm = (try? String(contentsOfFile: "/proc/self/statm", encoding: .utf8)) ?? ""
        let resident = statm.split(separator: " ").dropFirst().first.flatMap { Int($0) } ?? 0
        return resident * Int(sysconf(Int32(_SC_PAGESIZE)))
    }

    @Test func itemAndTableBytesPerItem() {
        let before = Self.heapInUse()
        var tables = [ItemTable](repeating: ItemTable(), count: Self.vbuckets)
        for i in 0..<Self.items {
            let k = Self.key(i)
            tables[i % Self.vbuckets][DocKey(k)] = ItemTableTests.item(k, value: Self.value(i), seqno: UInt64(i))
        }
        let perItem = Double(Self.heapInUse() - before) / Double(Self.items)
        print("memory probe: item + table \(perItem) B per item")
        #expect(tables.reduce(0) { $0 + $1.count } == Self.items)
        #expect(perItem < 1_120)
    }

    @Test func engineBytesPerFlushedItem() throws {
        let dir = TemporaryDirectory("storage")
        let before = Self.heapInUse()
        let e = try openEngine(dir, quotaMB: 4096, vbuckets: Self.vbuckets)
        defer { e.shutdown() }
        let opened = Self.heapInUse()
        for i in 0..<Self.items {
            let k = Self.key(i)
            _ = try e.store(.set, vbOf(k, e), k, value: Self.value(i), flags: 0, expiry: 0, datatype: .json, cas: .zero)
        }
        let loaded = Self.heapInUse()
        try waitAllPersisted(e)
        let flushed = Self.heapInUse()
        let per = { (a: Int, b: Int) in Double(b - a) / Double(Self.items) }
        print(
            "memory probe: engine opened +\(opened - before) B; loaded \(per(opened, loaded)) B per item; "
                + "flushed \(per(opened, flushed)) B per item")
        #expect(e.stats().currItems == Self.items)
    }
}
