import SetteeCore
import SetteeTestSupport
import Testing

@testable import SetteeStorage

@Suite(.onTestThreads) struct ItemTableTests {
    static func item(_ key: [UInt8], value: [UInt8]?, seqno: UInt64) -> Item {
        Item(
            key: key, value: value, cas: CAS(seqno &* 7), revSeqno: RevSeqNo(1), bySeqno: SeqNo(seqno), flags: 3,
            expiry: 0, datatype: .json, deleted: false, dirty: false, queued: false, referenced: false, corrupt: false)
    }

    /// Random inserts, replacements and removals (long keys included, so the table resizes and removals shift probe
    /// runs back) leave the table equal to a Dictionary fed the same operations, at every step's end.
    @Test func matchesADictionaryUnderRandomOperations() {
        var rng = SplitMix64(seed: 48)
        var table = ItemTable()
        var reference: [[UInt8]: UInt64] = [:]
        for step in 0..<20_000 {
            let n = Int.random(in: 0..<600, using: &rng)
            let key = Array("k\(n)".utf8) + (n % 7 == 0 ? [UInt8](repeating: 120, count: 30) : [])
            if Int.random(in: 0..<4, using: &rng) == 0 {
                table[DocKey(key)] = nil
                reference[key] = nil
            } else {
                table[DocKey(key)] = Self.item(key, value: [UInt8(n & 0xff)], seqno: UInt64(step))
                reference[key] = UInt64(step)
            }
            #expect(table.count == reference.count)
        }
        #expect(Double(table.count) <= ItemTable.maxLoad * Double(table.capacity))
        for (key, seqno) in reference {
            let found = table[DocKey(key)]
            #expect(found?.bySeqno == SeqNo(seqno) && found?.key == key, "\(key)")
        }
        for n in 600..<700 { #expect(table[DocKey(Array("k\(n)".utf8))] == nil) }
        var seen = 0
        for (key, item) in table {
            #expect(reference[key.bytes] == item.bySeqno.rawValue)
            seen += 1
        }
        #expect(seen == reference.count)
    }

    /// The table grows only when an insert would pass `maxLoad`, to a capacity that puts it back at `minLoad`, so
    /// its 9 bytes a slot stay within 9 / 0.85 ... 9 / 0.65 bytes per item; removing every item frees the arrays.
    @Test func resizesBetweenMinAndMaxLoad() {
        var table = ItemTable()
        var resizes = 0
        for n in 0..<5_000 {
            let before = table.capacity
            let key = Array("doc::\(n)".utf8)
            table[DocKey(key)] = Self.item(key, value: [], seqno: UInt64(n))
            #expect(Double(table.count) <= ItemTable.maxLoad * Double(table.capacity))
            if table.capacity != before {
                resizes += 1
                #expect(Double(before) * ItemTable.maxLoad < Double(table.count))
                let expected = Swift.max(
                    ItemTable.minimumCapacity, Int((Double(table.count) / ItemTable.minLoad).rounded(.up)))
                #expect(table.capacity == expected, "\(table.count) items in \(table.capacity) slots")
            }
        }
        #expect(resizes > 5 && resizes < 40)
        for n in 0..<5_000 { table[DocKey(Array("doc::\(n)".utf8))] = nil }
        #expect(table.isEmpty && table.capacity == 0)
    }

    /// An item keeps its fields, key and value in its one allocation; eviction drops the value bytes only.
    /// After most items are removed (a tombstone purge), `shrinkIfSparse` rebuilds the table at its minimum load and
    /// every remaining item is still found; a table that is not sparse keeps its capacity.
    @Test func shrinksWhenSparse() {
        var table = ItemTable()
        for n in 0..<4_000 { table[DocKey(Array("s\(n)".utf8))] = Self.item(Array("s\(n)".utf8), value: [1], seqno: 1) }
        let full = table.capacity
        table.shrinkIfSparse()
        #expect(table.capacity == full)
        for n in 0..<3_900 { table[DocKey(Array("s\(n)".utf8))] = nil }
        #expect(table.capacity == full)
        table.shrinkIfSparse()
        #expect(table.capacity < full / 10 && table.count == 100)
        #expect(Double(table.count) <= ItemTable.maxLoad * Double(table.capacity))
        for n in 3_900..<4_000 { #expect(table[DocKey(Array("s\(n)".utf8))]?.key == Array("s\(n)".utf8)) }
        for n in 0..<3_900 { #expect(table[DocKey(Array("s\(n)".utf8))] == nil) }
    }

    @Test func itemFieldsRoundTrip() {
        var a = Self.item(Array("user::1".utf8), value: [1, 2, 3], seqno: 9)
        #expect(a.key == Array("user::1".utf8) && a.value == [1, 2, 3] && a.valueCount == 3 && a.hasValue)
        #expect(a.bySeqno == SeqNo(9) && a.cas == CAS(63) && a.flags == 3 && a.datatype == .json)
        a.dirty = true
        a.queued = true
        a.deleted = true
        #expect(a.dirty && a.queued && a.deleted && !a.referenced && !a.corrupt)
        a.value = nil
        #expect(!a.hasValue && a.value == nil && a.valueCount == 0 && a.key == Array("user::1".utf8) && a.dirty)
        a.value = []
        #expect(a.hasValue && a.value == [])
        #expect(a.memoryFootprint(keyLength: 7) == MemoryAccounting.itemBytes(keyLength: 7, valueLength: 0))
    }

    /// A copy taken out of the table (a prepare's committed version, a change-feed snapshot) does not see later
    /// changes made in the table, and changing the table's item in place leaves the copy's allocation alone.
    @Test func copiesAreValues() {
        let key = Array("k".utf8)
        var table = ItemTable()
        table[DocKey(key)] = Self.item(key, value: [7], seqno: 1)
        let copy = table[DocKey(key)]
        guard let i = table.index(forKey: DocKey(key)) else {
            Issue.record("key not found")
            return
        }
        table[at: i].dirty = true
        table[at: i].value = [8, 9]
        #expect(copy?.dirty == false && copy?.value == [7])
        #expect(table[at: i].dirty && table[at: i].value == [8, 9])
        #expect(MemoryLayout<ItemHeader>.size == 35 && MemoryLayout<Item?>.size == 8)
    }

    /// The read path (`readiness(at:)`, `withValue(at:)`) reads the item where it lies and agrees with the item's own
    /// `readiness` in every state: absent, expired, corrupt, evicted and ready; only a ready item not yet marked
    /// referenced is changed (marked once, in place), and a copy taken before does not see the mark.
    @Test func readPathAgreesWithTheItemInEveryState() {
        let now: UInt32 = 1_000_000
        func fresh(_ change: (inout Item) -> Void) -> (ItemTable, Int, Item) {
            let key = Array("r".utf8)
            var item = Self.item(key, value: [4, 5], seqno: 2)
            change(&item)
            var table = ItemTable()
            table[DocKey(key)] = item
            guard let i = table.index(forKey: DocKey(key)) else { preconditionFailure("key not found") }
            return (table, i, item)
        }
        let states: [(String, (inout Item) -> Void, Item.Readiness)] = [
            ("deleted", { $0.deleted = true }, .absent),
            ("expired", { $0.expiry = now - 1 }, .expired),
            ("corrupt", { $0.corrupt = true }, .corrupt),
            ("evicted", { $0.value = nil }, .evicted),
            ("ready, referenced", { $0.referenced = true }, .ready),
            ("ready, not referenced", { _ in }, .ready),
        ]
        for (name, change, expected) in states {
            var (table, i, item) = fresh(change)
            let before = table[at: i]
            var own = item
            #expect(own.readiness(nowSeconds: now) == expected, "\(name)")
            #expect(table.readiness(at: i, nowSeconds: now) == expected, "\(name)")
            #expect(table[at: i].referenced == (expected == .ready), "\(name)")
            #expect(before.referenced == item.referenced, "\(name): the copy taken before is unchanged")
            if expected == .ready {
                let read = table.withValue(at: i) { value, meta in (Array(value), meta.bySeqno) }
                #expect(read.0 == [4, 5] && read.1 == SeqNo(2), "\(name)")
            }
        }
    }

    /// `capacity` (kept beside the arrays for the read path) follows every resize and the release of an emptied table,
    /// and each index the table hands out reads back its own key through the unchecked path.
    @Test func capacityFollowsTheArrays() {
        var table = ItemTable()
        #expect(table.capacity == 0)
        for n in 0..<300 {
            let key = Array("c::\(n)".utf8)
            table[DocKey(key)] = Self.item(key, value: [UInt8(n & 0xff)], seqno: UInt64(n))
            guard let i = table.index(forKey: DocKey(key)) else {
                Issue.record("c::\(n) not found after its insert")
                return
            }
            #expect(i < table.capacity)
            #expect(table.withValue(at: i) { value, _ in Array(value) } == [UInt8(n & 0xff)])
            #expect(table.key(at: i).bytes == key)
        }
        var occupied = 0
        for i in 0..<table.capacity where table.isOccupied(i) { occupied += 1 }
        #expect(occupied == 300)
        for n in 0..<300 { table[DocKey(Array("c::\(n)".utf8))] = nil }
        #expect(table.capacity == 0 && table.index(forKey: DocKey(Array("c::0".utf8))) == nil)
    }
}
