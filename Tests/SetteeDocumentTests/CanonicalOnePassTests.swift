import SetteeCore
import SetteeDocument
import SetteeJSON
import Testing

@Suite struct CanonicalOnePassTests {
    /// Bodies with sorted, unsorted, nested and repeated member names, arrays of objects, escapes and numbers.
    static let bodies: [String] = [
        #"{}"#,
        #"[]"#,
        #""s""#,
        #"{"a":1}"#,
        #"{"done":true,"n":3,"text":"x","title":"t","type":"note"}"#,
        #"{"type":"note","n":3,"title":"note 3","done":false,"text":"lorem ipsum "}"#,
        #"{"z":1,"a":{"y":[1,"s",{"q":true,"b":null}],"b":2.5},"é":"ü\"x\n","e":"\u0001"}"#,
        #"{"b":[{"d":1,"c":2},{"f":{"h":[],"g":{}}}],"a":-0.125,"ab":1e300,"aa":[[{"y":1,"x":2}]]}"#,
        #"{"k":1,"k":2,"a":3,"k":0}"#,
        #"{"a":1,"a":2}"#,
        #"{"z":{"a":1,"b":[{"c":1,"d":2}]},"a":[1,[]],"m":"x\ty","b":{}}"#,
        #"{"_attachments":{"f":{"stub":true,"digest":"sha1-x","revpos":2}},"x":1}"#,
    ]

    // Proves the one-pass writer's two outputs are byte for byte `serialized()` and `CanonicalJSON.bytes`
    // for every table body and for 500 seeded random bodies (seed printed on failure).
    @Test func onePassEqualsTheSeparateWriters() throws {
        var values = try Self.bodies.map { try JSON.parse(Array($0.utf8)) }
        let seed: UInt64 = 0x5E77_EE19
        var rng = SplitMix64(seed: seed)
        for _ in 0..<500 { values.append(Self.randomValue(depth: 0, rng: &rng)) }
        for value in values {
            var stored: [UInt8] = []
            var canonical: [UInt8] = [7]  // output is appended after what the buffer holds
            CanonicalJSON.write(value, stored: &stored, canonical: &canonical)
            #expect(stored == value.serialized(), "seed \(seed): \(value.text)")
            #expect(canonical == [7] + CanonicalJSON.bytes(value), "seed \(seed): \(value.text)")
        }
    }

    // Proves `nextWithSerialized` gives `next`'s revision id and `serialized()`'s bytes, with and without a
    // parent, deleted or not, including a body with an undigested `_id` member (the two-pass fallback) and
    // the pinned digest of `RevTreeStorageTests.revisionDigestsAreKnownValues`; nil at the generation limit.
    // The 500 seeded random bodies take every path: objects whose member values are canonical (the digest
    // read from the stored pieces), nested objects out of order (the canonical copy), `_` members.
    @Test func nextWithSerializedMatchesNext() throws {
        var values = try Self.bodies.map { try JSON.parse(Array($0.utf8)) }
        var rng = SplitMix64(seed: 0x5E77_EE19)
        for _ in 0..<500 { values.append(Self.randomValue(depth: 0, rng: &rng)) }
        let pinned = try JSON.parse(
            #"{"z":1,"_id":"ignored","a":{"y":[1,"s",{"q":true,"b":null}],"b":2.5},"é":"ü\"x\n","#
                + #""_attachments":{"f":{"stub":true,"digest":"sha1-x"}}}"#)
        values.append(pinned)
        for value in values {
            for parent in [nil, RevID("1-abc"), RevID("7-ff")] {
                for deleted in [false, true] {
                    let one = try #require(RevID.nextWithSerialized(parent: parent, deleted: deleted, body: value))
                    #expect(one.0 == RevID.next(parent: parent, deleted: deleted, body: value))
                    #expect(one.1 == value.serialized())
                }
            }
        }
        let pinnedRev = try #require(RevID.nextWithSerialized(parent: RevID("1-abc")!, deleted: false, body: pinned))
        #expect(pinnedRev.0 == RevID(generation: 2, digest: "ee44866a5bc3766f53b71d8d762bb218"))
        let top = RevID(generation: Limits.maxRevGeneration, digest: "a")
        #expect(RevID.nextWithSerialized(parent: top, deleted: false, body: .object([])) == nil)
    }

    static func randomValue(depth: Int, rng: inout SplitMix64) -> JSON {
        let names = ["a", "b", "ab", "B", "_x", "é", "a\"", "z", "aa", ""]
        let pick = depth >= 4 ? rng.next() % 4 : rng.next() % 6
        switch pick {
        case 0: return .string(names[Int(rng.next() % UInt64(names.count))] + "\n\u{1}")
        case 1: return .number(Double(Int64(bitPattern: rng.next() % 2001) - 1000) / 8)
        case 2: return .bool(rng.next() % 2 == 0)
        case 3: return .null
        case 4: return .array((0..<Int(rng.next() % 4)).map { _ in randomValue(depth: depth + 1, rng: &rng) })
        default:
            return .object(
                (0..<Int(rng.next() % 6)).map { _ in
                    (names[Int(rng.next() % UInt64(names.count))], randomValue(depth: depth + 1, rng: &rng))
                })
        }
    }
}
