import SetteeCore
import SetteeTestSupport
import Synchronization
import Testing

@testable import SetteeStorage

/// `BucketEngine.warm` (ADR 0114) is a hint: it starts cache misses ahead of look-ups and changes nothing.
@Suite(.onTestThreads) struct WarmTests {
    let dir = TemporaryDirectory("storage")

    /// Proves warming changes no answer and no count, whatever it is given: present and absent keys, a vBucket the
    /// bucket does not have, an empty key, a key longer than the inline ones, more keys than one call takes, an
    /// empty vBucket, and keys whose probe runs were shifted by removals. Every look-up after it answers as the
    /// same look-up did before it.
    @Test func warmingChangesNoAnswer() throws {
        let e = try openEngine(dir, vbuckets: 4)
        defer { e.shutdown() }
        let long = key(String(repeating: "l", count: 40))
        var keys: [(VBucketID, [UInt8])] = [(VBucketID(1), long), (VBucketID(2), []), (VBucketID(9_999), key("k1"))]
        for i in 0..<200 {
            let k = key("k\(i)")
            keys.append((VBucketID(0), k))
            _ = try e.store(.set, VBucketID(0), k, value: key("v\(i)"), flags: 0, expiry: 0, datatype: .raw, cas: .zero)
        }
        _ = try e.store(.set, VBucketID(1), long, value: key("long"), flags: 0, expiry: 0, datatype: .raw, cas: .zero)
        for i in stride(from: 0, to: 200, by: 3) { _ = try e.delete(VBucketID(0), key("k\(i)"), cas: .zero) }
        keys += (0..<10).map { (VBucketID(3), key("empty\($0)")) }
        func answers() -> [String] {
            keys.map { vb, k in
                do throws(EngineError) {
                    return String(decoding: try e.get(vb, k).value, as: UTF8.self)
                } catch {
                    return "\(error)"
                }
            }
        }
        let before = answers()
        let items = e.stats().currItems
        #expect(before.filter { $0.hasPrefix("v") }.count == 133)
        #expect(before[0] == "long")
        for start in stride(from: 0, to: keys.count, by: 7) {
            let batch = keys[start...].prefix(BucketEngine.warmCapacity + 5)
            withWarmKeys(batch.map { $0.0 }, batch.map { $0.1 }) { e.warm($0) }
        }
        #expect(answers() == before)
        #expect(e.stats().currItems == items)
    }

    /// Proves a key warmed with a leading byte (a named collection's marker before its wire key, ADR 0143 session 61)
    /// is the engine key's own `DocKey`: equal, with the same hash, for every length up to the inline capacity and
    /// past it (made whole there), so `warm` prefetches the slot the look-up of `marker ‖ wire key` will read.
    @Test func aLeadingByteMakesTheEngineKeysDocKey() {
        for length in 1...(DocKey.inlineCapacity + 3) {
            let wire = (0..<length).map { UInt8(truncatingIfNeeded: 0x08 &+ $0 &* 37) }
            let engineKey = [UInt8(0xff)] + wire
            let warmed = wire.withUnsafeBytes { DocKey(leading: 0xff, inline: $0) }
            #expect(warmed == DocKey(engineKey), "length \(length)")
            #expect(warmed.hashValue == DocKey(engineKey).hashValue, "length \(length)")
            #expect(warmed.bytes == engineKey, "length \(length)")
        }
    }

    /// Proves warming named collections' keys (a leading marker) changes no answer either: the same look-ups answer
    /// as before, present, absent, and one whose engine key passes the inline capacity only with its marker.
    @Test func warmingWithALeadingByteChangesNoAnswer() throws {
        let e = try openEngine(dir, vbuckets: 2)
        defer { e.shutdown() }
        let wires = (0..<40).map { key("\u{08}k\($0)") } + [key(String(repeating: "w", count: DocKey.inlineCapacity))]
        for (i, w) in wires.enumerated() where i % 2 == 0 {
            _ = try e.store(
                .set, VBucketID(1), [0xff] + w, value: key("v\(i)"), flags: 0, expiry: 0, datatype: .raw, cas: .zero)
        }
        func answers() -> [String] {
            wires.map { w in
                do throws(EngineError) {
                    return String(decoding: try e.get(VBucketID(1), [0xff] + w).value, as: UTF8.self)
                } catch {
                    return "\(error)"
                }
            }
        }
        let before = answers()
        #expect(before.filter { $0.hasPrefix("v") }.count == 21)
        let joined = wires.flatMap { $0 }
        joined.withUnsafeBytes { all in
            var at = 0
            let warm = wires.map { w in
                defer { at += w.count }
                return WarmKey(
                    vb: VBucketID(1), leadingByte: 0xff, key: UnsafeRawBufferPointer(rebasing: all[at..<at + w.count]))
            }
            warm.withUnsafeBufferPointer { keys in
                for start in stride(from: 0, to: keys.count, by: 16) {
                    e.warm(UnsafeBufferPointer(rebasing: keys[start..<min(start + 16, keys.count)]))
                }
            }
        }
        #expect(answers() == before)
    }

    /// The keys as `WarmKey`s over the arrays' own bytes, valid inside `body`.
    private func withWarmKeys(
        _ vbs: [VBucketID], _ keys: [[UInt8]], _ body: (UnsafeBufferPointer<WarmKey>) -> Void
    ) {
        let joined = keys.flatMap { $0 }
        joined.withUnsafeBytes { all in
            var at = 0
            let warm = zip(vbs, keys).map { vb, k in
                defer { at += k.count }
                return WarmKey(vb: vb, key: UnsafeRawBufferPointer(rebasing: all[at..<at + k.count]))
            }
            warm.withUnsafeBufferPointer(body)
        }
    }

    /// Proves the layout ADR 0114's first pass relies on: a vBucket object's lock and a read's fields of its table
    /// (`items`, `state`, `pending`) lie within the object's first two cache lines, the ones `warm` prefetches, so a
    /// field added ahead of them fails here instead of silently undoing the warming. The table's place in the object
    /// is read at run time (a class has no `MemoryLayout` offsets).
    @Test func aReadsFieldsShareTheVBucketObjectsFirstTwoLines() throws {
        let e = try openEngine(dir, vbuckets: 1)
        defer { e.shutdown() }
        let vbucket = e.core.vbuckets[0]
        let object = UInt(bitPattern: Unmanaged.passUnretained(vbucket).toOpaque())
        let tableOffset = vbucket.table.withLock { t in
            withUnsafeMutablePointer(to: &t) { Int(UInt(bitPattern: $0) &- object) }
        }
        #expect(tableOffset > 0 && tableOffset <= 32, "the lock word and the table open the object (\(tableOffset))")
        let ends = [
            MemoryLayout<VBucketTable>.offset(of: \.items)! + MemoryLayout<ItemTable>.size,
            MemoryLayout<VBucketTable>.offset(of: \.state)! + MemoryLayout<VBucketState>.size,
            MemoryLayout<VBucketTable>.offset(of: \.pending)! + MemoryLayout<[DocKey: PendingSyncWrite]>.size,
        ]
        for end in ends { #expect(tableOffset + end <= 128, "a read's field ends at byte \(tableOffset + end)") }
    }
}
