import Foundation
import SetteeCore
import SetteeJSON
import Testing

/// Couchbase's JSON delta (`JSONDelta`, ADR 0125): the format's published examples, deltas made here applied back
/// byte for byte (a seeded property test), and hostile deltas refused with an error, never a trap.
@Suite struct JSONDeltaTests {
    static func parse(_ text: String) throws -> JSON { try JSON.parse(text) }

    /// The examples of Fleece's `Deltas.md` apply as published (one misprint corrected) (the text patches are Fleece's own output, made by
    /// diff-match-patch, so they also prove we read patches we would not write ourselves).
    @Test(arguments: [
        (
            #"{"age": 8, "grade": 3, "name": {"first": "Bobby", "last": "Briggs"}}"#,
            #"{"age": 18, "grade": [], "name": {"first": "Robert"}}"#,
            #"{"age":18,"name":{"first":"Robert","last":"Briggs"}}"#
        ),
        (
            #"{"age": 18, "name": {"first": "Robert", "last": "Briggs"}}"#,
            #"{"age": 38, "name": {"title": "Maj."}}"#,
            #"{"age":38,"name":{"first":"Robert","last":"Briggs","title":"Maj."}}"#
        ),
        (
            // Deltas.md prints "31=" here, one byte more than the 30 left, which Fleece's own apply refuses too
            // (`hostileDeltasAreRefused` has it); the patch as meant:
            #""The fog comes in on little cat feet""#, #"["4=1-1+d|30=",0,2]"#,
            #""The dog comes in on little cat feet""#
        ),
        (
            #""to wound the autumnal city. So howled out for the world to give him a name.  The in-dark answered with the wind.""#,
            #"["1-1+T|12=5-4+eter|13=3+he |37=1-3+its|6=1-27=4-5=",0,2]"#,
            #""To wound the eternal city. So he howled out for the world to give him its name. The in-dark answered with wind.""#
        ),
        (#"[1, 2, 3]"#, #"{"1": 5, "3-": [4, 5]}"#, #"[1,5,3,4,5]"#),
        (#"[1, 2, 3]"#, #"{"1-": []}"#, #"[1]"#),
        (#"{"a": 1}"#, #"{}"#, #"{"a":1}"#),
        (#"7"#, #"{}"#, #"7"#),
        (#"{"a": 1}"#, #"[[1, 2]]"#, #"[1,2]"#),
        (#"{"a": 1, "b": 2}"#, #"{"a": [1, 0, 0], "b": [2, 3]}"#, #"{"b":3}"#),
    ])
    func publishedVectorsApply(old: String, delta: String, expected: String) throws {
        let result = try JSONDelta.apply(try Self.parse(delta), to: try Self.parse(old))
        #expect(result.text == expected)
    }

    /// What `create` writes for the published cases: Fleece's own deltas for objects and arrays.
    @Test func createWritesFleeceDeltas() throws {
        let old = try Self.parse(#"{"age": 8, "grade": 3, "name": {"first": "Bobby", "last": "Briggs"}}"#)
        let new = try Self.parse(#"{"age": 18, "name": {"first": "Robert", "last": "Briggs"}}"#)
        #expect(JSONDelta.create(from: old, to: new).text == #"{"age":18,"name":{"first":"Robert"},"grade":[]}"#)
        #expect(JSONDelta.create(from: old, to: old).text == "{}")
        #expect(JSONDelta.create(from: .int(1), to: .int(2)).text == "[2]")
        let a = try Self.parse("[1,2,3]")
        #expect(JSONDelta.create(from: a, to: try Self.parse("[1,5,3,4]")).text == #"{"1":5,"3-":[4]}"#)
        #expect(JSONDelta.create(from: a, to: try Self.parse("[1]")).text == #"{"1-":[]}"#)
        let long = String(repeating: "abcdefghij", count: 10)
        var bytes = Array(long.utf8)
        bytes[53] = UInt8(ascii: "X")
        let edited = String(decoding: bytes, as: UTF8.self)
        let d = JSONDelta.create(from: .object([("s", .string(long))]), to: .object([("s", .string(edited))]))
        #expect(d.text == #"{"s":["53=1-1+X|46=",0,2]}"#)
        // A member order `apply` could not give makes the object a whole replacement.
        let reordered = JSONDelta.create(
            from: try Self.parse(#"{"a":1,"b":2}"#), to: try Self.parse(#"{"b":2,"a":1}"#))
        #expect(reordered.text == #"[{"b":2,"a":1}]"#)
    }

    /// apply(create(a, b), a) serialises to exactly b's bytes, for random pairs: b is a made by random edits (members
    /// added, removed, reordered; items changed, appended, cut; long strings edited in place, multi-byte characters
    /// included; types changed), the delta travelling as text in between. Replay with SETTEE_SEED.
    @Test func createThenApplyGivesTheNewValueByteForByte() throws {
        let seed =
            UInt64(ProcessInfo.processInfo.environment["SETTEE_SEED"] ?? "") ?? UInt64.random(in: 0...UInt64.max)
        print("JSONDeltaTests seed \(seed)")
        var g = SplitMix64(seed: seed)
        var patched = 0
        for round in 0..<2_000 {
            let a = Self.randomValue(&g, depth: 0)
            let b = Self.mutate(a, &g, depth: 0)
            let delta = JSONDelta.create(from: a, to: b)
            let wire = try JSON.parse(delta.serialized())
            let result = try JSONDelta.apply(wire, to: a)
            #expect(result.serialized() == b.serialized(), "seed \(seed) round \(round): \(a.text) -> \(b.text)")
            if delta.text.contains(",0,2]") { patched += 1 }
        }
        #expect(patched > 0, "some rounds used text patches")
    }

    static let alphabet: [String] = ["a", "b", "é", "e\u{301}", "漢", "🙂", " ", "\"", "\\", "\n", "z"]

    static func randomString(_ g: inout SplitMix64, long: Bool) -> String {
        let count = long ? Int.random(in: 60...200, using: &g) : Int.random(in: 0...6, using: &g)
        return (0..<count).map { _ in alphabet[Int.random(in: 0..<alphabet.count, using: &g)] }.joined()
    }

    static func randomScalar(_ g: inout SplitMix64) -> JSON {
        switch Int.random(in: 0..<7, using: &g) {
        case 0: return .null
        case 1: return .bool(Bool.random(using: &g))
        case 2: return .int(Int.random(in: -1000...1000, using: &g))
        case 3: return .number(Double.random(in: -1e6...1e6, using: &g))
        case 4: return .string(randomString(&g, long: true))
        default: return .string(randomString(&g, long: false))
        }
    }

    static func randomValue(_ g: inout SplitMix64, depth: Int) -> JSON {
        let roll = depth == 0 ? 0 : Int.random(in: 0..<6, using: &g)
        if depth >= 4 || roll >= 3 { return randomScalar(&g) }
        if roll == 2 {
            return .array((0..<Int.random(in: 0...5, using: &g)).map { _ in randomValue(&g, depth: depth + 1) })
        }
        var members: [(String, JSON)] = []
        for i in 0..<Int.random(in: 0...6, using: &g) {
            members.append(("k\(i)" + randomString(&g, long: false), randomValue(&g, depth: depth + 1)))
        }
        return .object(uniqueMembers(members))
    }

    /// Names repeat only by chance; a parsed object never has them twice (by `String ==`).
    static func uniqueMembers(_ members: [(String, JSON)]) -> [(String, JSON)] {
        var seen = Set<String>()
        return members.filter { seen.insert($0.0).inserted }
    }

    static func mutate(_ v: JSON, _ g: inout SplitMix64, depth: Int) -> JSON {
        let roll = Int.random(in: 0..<10, using: &g)
        if roll == 0 && depth > 0 { return randomValue(&g, depth: depth) }
        switch v {
        case .object(var members):
            for i in members.indices where Int.random(in: 0..<3, using: &g) == 0 {
                members[i].1 = mutate(members[i].1, &g, depth: depth + 1)
            }
            if !members.isEmpty && Int.random(in: 0..<4, using: &g) == 0 {
                members.remove(at: Int.random(in: 0..<members.count, using: &g))
            }
            if Int.random(in: 0..<4, using: &g) == 0 {
                members.append(("n" + randomString(&g, long: false), randomValue(&g, depth: depth + 1)))
            }
            if members.count > 1 && Int.random(in: 0..<8, using: &g) == 0 { members.swapAt(0, members.count - 1) }
            return .object(uniqueMembers(members))
        case .array(var items):
            for i in items.indices where Int.random(in: 0..<3, using: &g) == 0 {
                items[i] = mutate(items[i], &g, depth: depth + 1)
            }
            if !items.isEmpty && Int.random(in: 0..<4, using: &g) == 0 {
                items.removeLast(Int.random(in: 1...items.count, using: &g))
            }
            if Int.random(in: 0..<4, using: &g) == 0 { items.append(randomValue(&g, depth: depth + 1)) }
            return .array(items)
        case .string(let s) where s.utf8.count >= 60:
            var chars = Array(s)
            let at = Int.random(in: 0..<chars.count, using: &g)
            let cut = Int.random(in: 0...min(3, chars.count - at), using: &g)
            chars.replaceSubrange(at..<(at + cut), with: Array(randomString(&g, long: false)))
            return .string(String(chars))
        default:
            return roll < 5 ? randomScalar(&g) : v
        }
    }

    /// Deltas that do not fit the old value, or are malformed, are refused with `JSONDeltaError`.
    @Test(arguments: [
        (#"{"a": 1}"#, #"{"b": []}"#),  // removes a member that is not there
        (#"{"a": 1}"#, #"{"b": {"c": 1}}"#),  // patches a member that is not there
        (#"{"a": 1}"#, #"{"a": {"c": 1}}"#),  // object delta for a number
        (#"{"a": "xy"}"#, #"{"a": ["5=", 0, 2]}"#),  // copies past the end
        (#""The fog comes in on little cat feet""#, #"["4=1-1+d|31=",0,2]"#),  // Deltas.md's misprint, past the end
        (#"{"a": "xy"}"#, #"{"a": ["1=9+ab|", 0, 2]}"#),  // insertion longer than the patch
        (#"{"a": "xy"}"#, #"{"a": ["2=2+ab", 0, 2]}"#),  // no '|'
        (#"{"a": "xy"}"#, #"{"a": ["1=", 0, 2]}"#),  // does not cover the old string
        (#"{"a": "xy"}"#, #"{"a": ["2=1?", 0, 2]}"#),  // unknown op
        (#"{"a": "xy"}"#, #"{"a": ["99999999999999999999=", 0, 2]}"#),  // count overflow
        (#"{"a": "xy"}"#, #"{"a": ["", 0, 2]}"#),  // empty patch
        (#"{"a": 5}"#, #"{"a": ["2=", 0, 2]}"#),  // text patch of a number
        (#"{"a": "é"}"#, #"{"a": ["1=1-", 0, 2]}"#),  // splits a character
        (#"{"a": 1}"#, #"{"a": [1, 2, 3, 4]}"#),  // too many items
        (#"{"a": 1}"#, #"{"a": [1, 0, 7]}"#),  // unknown mode
        (#"{"a": 1}"#, #"{"a": [1, 0, "x"]}"#),  // mode not a number
        (#"[1, 2]"#, #"{"5": 1}"#),  // index past the end
        (#"[1, 2]"#, #"{"01": 1}"#),  // not a canonical index
        (#"[1, 2]"#, #"{"0": []}"#),  // removes an item
        (#"[1, 2]"#, #"{"1-": 5}"#),  // remainder not an array
        (#"[1, 2]"#, #"{"0-": [], "1": 3}"#),  // index past the cut
        (#"[1, 2]"#, #"{"x": 3}"#),
        (#"{"a": 1}"#, #"[]"#),  // removes the whole value
        (#"{"a": 1}"#, #"{"b": [1, 2]}"#),  // replaces what is not there
    ])
    func hostileDeltasAreRefused(old: String, delta: String) throws {
        #expect(throws: JSONDeltaError.self) {
            try JSONDelta.apply(try Self.parse(delta), to: try Self.parse(old))
        }
    }

    /// Bounds: a delta nesting past `maxDepth`, a result past `maxDepth`, and a result longer than `maxBytes` are
    /// refused (the deep delta is walked iteratively only up to the bound).
    @Test func boundsAreChecked() throws {
        var deep = JSON.int(1)
        for _ in 0..<40 { deep = .object([("a", deep)]) }
        var old = JSON.int(0)
        for _ in 0..<40 { old = .object([("a", old)]) }
        #expect(throws: JSONDeltaError.self) { try JSONDelta.apply(deep, to: old, maxDepth: 10) }
        let inserting = JSON.object([("b", .array([deep]))])
        #expect(throws: JSONDeltaError.self) {
            try JSONDelta.apply(inserting, to: .object([]), maxDepth: 10)
        }
        let big = JSON.object([("s", .string(String(repeating: "x", count: 1000)))])
        #expect(throws: JSONDeltaError.self) { try JSONDelta.apply(big, to: .object([]), maxBytes: 500) }
        #expect(try JSONDelta.apply(big, to: .object([]), maxBytes: 2000).serialized().count == 1008)
    }
}
