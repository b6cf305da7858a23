import Crypto
import SetteeCore
import SetteeJSON

/// A revision id, `generation-digest` ("3-9f2c…"): the generation counts edits since the document was
/// created, the digest tells apart revisions of the same generation on different branches.
///
/// Ordering is CouchDB's: by generation, then by digest as a string. The revision tree's winner is
/// the greatest non-deleted leaf under this order, so every peer picks the same winner.
public struct RevID: Hashable, Comparable, Sendable, CustomStringConvertible {
    public let generation: Int
    public let digest: String

    public init(generation: Int, digest: String) {
        self.generation = generation
        self.digest = digest
    }

    /// Parses `"N-digest"` with 1 ≤ N ≤ `Limits.maxRevGeneration` and a non-empty digest; nil otherwise.
    public init?(_ text: String) {
        guard let dash = text.firstIndex(of: "-"),
            let generation = Int(text[text.startIndex..<dash]), generation >= 1,
            generation <= Limits.maxRevGeneration
        else { return nil }
        let digest = String(text[text.index(after: dash)...])
        guard RevID.isValidDigest(digest) else { return nil }
        self.init(generation: generation, digest: digest)
    }

    /// Whether `digest` may follow a generation's dash: non-empty, printable ASCII without spaces. The one rule
    /// for every digest taken from outside (`init?(_:)`, `_revisions.ids` in `RevTree.parseRevisions`): a tree
    /// holding any other digest would not parse back from its stored form.
    public static func isValidDigest(_ digest: String) -> Bool {
        !digest.isEmpty && digest.utf8.allSatisfy { $0 > 0x20 && $0 < 0x7F }
    }

    public var description: String { "\(generation)-\(digest)" }

    /// Calls `body` with `description`'s UTF-8 bytes, written in a temporary buffer: binding or digesting a
    /// rev id on every save then builds no `String`.
    public func withText<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        var digest = self.digest
        let generation = self.generation
        return try digest.withUTF8 { d in
            // Up to 20 digits and a sign, the dash, the digest.
            try withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 22 + d.count) { buf in
                var n = 0
                var m = generation.magnitude
                repeat {
                    buf[n] = UInt8(ascii: "0") + UInt8(truncatingIfNeeded: m % 10)
                    m /= 10
                    n += 1
                } while m > 0
                if generation < 0 {
                    buf[n] = UInt8(ascii: "-")
                    n += 1
                }
                buf[0..<n].reverse()
                buf[n] = UInt8(ascii: "-")
                n += 1
                for byte in d {
                    buf[n] = byte
                    n += 1
                }
                return try body(UnsafeRawBufferPointer(start: buf.baseAddress, count: n))
            }
        }
    }

    public static func < (a: RevID, b: RevID) -> Bool {
        a.generation != b.generation ? a.generation < b.generation : a.digest < b.digest
    }

    /// The id of a new revision, deterministic so the same edit made on two peers gets the same id:
    /// generation = parent's + 1; digest = MD5 (hex) of the parent's id, the deleted flag and the
    /// canonical JSON (members sorted by name, recursively) of the body without `_`-prefixed members
    /// other than `_attachments`. Nil when the parent is at `Limits.maxRevGeneration` (or beyond, if built
    /// with `init(generation:digest:)`): the document cannot take another edit.
    public static func next(parent: RevID?, deleted: Bool, body: JSON) -> RevID? {
        guard let generation = nextGeneration(after: parent) else { return nil }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(1024)
        if let parent { parent.withText { bytes.append(contentsOf: $0) } }
        bytes.append(0)
        bytes.append(deleted ? 1 : 0)
        // `_` members other than `_attachments` are not digested; most bodies have none (no copy then).
        if case .object(let members) = body,
            members.contains(where: { $0.0.utf8.first == UInt8(ascii: "_") && $0.0 != "_attachments" })
        {
            let digested = members.filter { !$0.0.hasPrefix("_") || $0.0 == "_attachments" }
            CanonicalJSON.write(.object(digested), into: &bytes)
        } else {
            CanonicalJSON.write(body, into: &bytes)
        }
        return RevID(generation: generation, digest: md5Hex(bytes))
    }

    /// `next(parent:deleted:body:)` and `body.serialized()` (the stored form, members in their own order)
    /// from one pass over the body: each scalar and string is written once and its bytes copied into the
    /// canonical form, whose objects are then put in name order by moving byte ranges. A body with `_`
    /// members other than `_attachments` (not digested) takes the two separate passes. Nil as `next`.
    public static func nextWithSerialized(parent: RevID?, deleted: Bool, body: JSON) -> (RevID, [UInt8])? {
        if case .object(let members) = body,
            members.contains(where: { $0.0.utf8.first == UInt8(ascii: "_") && $0.0 != "_attachments" })
        {
            guard let rev = next(parent: parent, deleted: deleted, body: body) else { return nil }
            return (rev, body.serialized())
        }
        guard let generation = nextGeneration(after: parent) else { return nil }
        var stored: [UInt8] = []
        stored.reserveCapacity(1024)
        var hasher = Insecure.MD5()
        if let parent { parent.withText { hasher.update(bufferPointer: $0) } }
        withUnsafeBytes(of: (UInt8(0), UInt8(deleted ? 1 : 0))) { hasher.update(bufferPointer: $0) }
        if case .object(let members) = body, members.allSatisfy({ CanonicalJSON.isCanonical($0.1) }) {
            // The common body: an object whose member values are already canonical (scalars, or containers
            // whose objects list their names in order). Its canonical form is the stored `"name":value`
            // pieces in name order, so the digest reads them from `stored` in that order: no canonical copy.
            CanonicalJSON.writeDigestingMembers(members, stored: &stored, into: &hasher)
        } else {
            var canonical: [UInt8] = []
            canonical.reserveCapacity(1024)
            CanonicalJSON.write(body, stored: &stored, canonical: &canonical)
            canonical.withUnsafeBytes { hasher.update(bufferPointer: $0) }
        }
        return (RevID(generation: generation, digest: hex(hasher.finalize())), stored)
    }

    /// MD5 of `bytes` as 32 lowercase hex digits: hashed straight from the array's storage and the text
    /// written in place (no intermediate arrays).
    private static func md5Hex(_ bytes: [UInt8]) -> String {
        var hasher = Insecure.MD5()
        bytes.withUnsafeBytes { hasher.update(bufferPointer: $0) }
        return hex(hasher.finalize())
    }

    /// A digest as lowercase hex digits, written in place.
    private static func hex(_ digest: Insecure.MD5Digest) -> String {
        digest.withUnsafeBytes { hash in
            String(unsafeUninitializedCapacity: 2 * hash.count) { out in
                for (i, byte) in hash.enumerated() {
                    out[2 * i] = hexDigit(byte >> 4)
                    out[2 * i + 1] = hexDigit(byte & 0xF)
                }
                return 2 * hash.count
            }
        }
    }

    @inline(__always)
    private static func hexDigit(_ nibble: UInt8) -> UInt8 {
        nibble < 10 ? UInt8(ascii: "0") + nibble : UInt8(ascii: "a") - 10 + nibble
    }

    /// The generation of a child of `parent` (1 for a new document); nil above `Limits.maxRevGeneration`.
    public static func nextGeneration(after parent: RevID?) -> Int? {
        let g = parent?.generation ?? 0
        guard g >= 0, g < Limits.maxRevGeneration else { return nil }
        return g + 1
    }
}

/// JSON with object members sorted by name (byte order of their UTF-8), recursively; the input to
/// revision digests, so two peers digest the same body identically whatever member order they use.
public enum CanonicalJSON {
    public static func write(_ value: JSON, into out: inout [UInt8]) {
        switch value {
        case .array(let items):
            out.append(UInt8(ascii: "["))
            for (i, item) in items.enumerated() {
                if i > 0 { out.append(UInt8(ascii: ",")) }
                write(item, into: &out)
            }
            out.append(UInt8(ascii: "]"))
        case .object(let members):
            out.append(UInt8(ascii: "{"))
            // The order of member indices, not a sorted copy of the members (no retain of every value).
            for (i, m) in nameOrder(members).enumerated() {
                if i > 0 { out.append(UInt8(ascii: ",")) }
                JSON.writeString(members[m].0, into: &out)
                out.append(UInt8(ascii: ":"))
                write(members[m].1, into: &out)
            }
            out.append(UInt8(ascii: "}"))
        default:
            value.write(into: &out)
        }
    }

    /// Writes `value` as `JSON.write(into:)` does into `stored` and as `write(_:into:)` does into
    /// `canonical`, serializing each string and number once (the canonical bytes are copies of the stored
    /// ones, reordered per object). Both outputs are byte for byte those of the separate writers.
    public static func write(_ value: JSON, stored: inout [UInt8], canonical: inout [UInt8]) {
        switch value {
        case .array(let items):
            stored.append(UInt8(ascii: "["))
            canonical.append(UInt8(ascii: "["))
            for (i, item) in items.enumerated() {
                if i > 0 {
                    stored.append(UInt8(ascii: ","))
                    canonical.append(UInt8(ascii: ","))
                }
                write(item, stored: &stored, canonical: &canonical)
            }
            stored.append(UInt8(ascii: "]"))
            canonical.append(UInt8(ascii: "]"))
        case .object(let members):
            stored.append(UInt8(ascii: "{"))
            canonical.append(UInt8(ascii: "{"))
            // The canonical `"name":value` pieces go in stored order, which is the canonical one when the
            // names strictly increase (most bodies built in order); otherwise the pieces are put in name
            // order afterwards with the same sort as `write(_:into:)` (so equal names order alike).
            let base = canonical.count
            var ranges: [Range<Int>] = []
            ranges.reserveCapacity(members.count)
            for (i, (key, member)) in members.enumerated() {
                if i > 0 {
                    stored.append(UInt8(ascii: ","))
                    canonical.append(UInt8(ascii: ","))
                }
                let start = canonical.count
                let keyStart = stored.count
                JSON.writeString(key, into: &stored)
                stored.append(UInt8(ascii: ":"))
                canonical.append(contentsOf: stored[keyStart...])
                write(member, stored: &stored, canonical: &canonical)
                ranges.append(start..<canonical.count)
            }
            if !namesIncrease(members) {
                let order = nameOrder(members)
                let pieces = Array(canonical[base...])
                canonical.removeSubrange(base...)
                for (i, m) in order.enumerated() {
                    if i > 0 { canonical.append(UInt8(ascii: ",")) }
                    canonical.append(contentsOf: pieces[(ranges[m].lowerBound - base)..<(ranges[m].upperBound - base)])
                }
            }
            stored.append(UInt8(ascii: "}"))
            canonical.append(UInt8(ascii: "}"))
        default:
            let start = stored.count
            value.write(into: &stored)
            canonical.append(contentsOf: stored[start...])
        }
    }

    /// Whether the names strictly increase (UTF-8 byte order): the stored order is then the canonical one.
    static func namesIncrease(_ members: [(String, JSON)]) -> Bool {
        members.indices.dropFirst().allSatisfy { members[$0 - 1].0.utf8.lexicographicallyPrecedes(members[$0].0.utf8) }
    }

    /// The members' indices in canonical (name) order: one sort for every canonical writer, so equal names order
    /// alike whichever writer ran.
    static func nameOrder(_ members: [(String, JSON)]) -> [Int] {
        var order = Array(members.indices)
        order.sort { members[$0].0.utf8.lexicographicallyPrecedes(members[$1].0.utf8) }
        return order
    }

    /// True when `write(_:into:)` writes `value` as `JSON.write(into:)` does: every object's names strictly
    /// increase (byte order of their UTF-8), recursively. Allocates nothing.
    public static func isCanonical(_ value: JSON) -> Bool {
        switch value {
        case .array(let items):
            return items.allSatisfy(isCanonical)
        case .object(let members):
            return namesIncrease(members) && members.allSatisfy { isCanonical($0.1) }
        default:
            return true
        }
    }

    /// Writes the object `members` as `JSON.write(into:)` does into `stored` and feeds `hasher` the bytes
    /// `write(_:into:)` would write for it, taken from `stored`: every member value must be canonical
    /// (`isCanonical`). Members out of name order are fed in the order `write(_:into:)` sorts them.
    static func writeDigestingMembers(
        _ members: [(String, JSON)], stored: inout [UInt8], into hasher: inout Insecure.MD5
    ) {
        let base = stored.count
        stored.append(UInt8(ascii: "{"))
        var pieces: [Range<Int>] = []
        pieces.reserveCapacity(members.count)
        for (i, (key, value)) in members.enumerated() {
            if i > 0 { stored.append(UInt8(ascii: ",")) }
            let start = stored.count
            JSON.writeString(key, into: &stored)
            stored.append(UInt8(ascii: ":"))
            value.write(into: &stored)
            pieces.append(start..<stored.count)
        }
        stored.append(UInt8(ascii: "}"))
        stored.withUnsafeBytes { bytes in
            if namesIncrease(members) {
                hasher.update(bufferPointer: UnsafeRawBufferPointer(rebasing: bytes[base...]))
                return
            }
            let order = nameOrder(members)
            withUnsafeBytes(of: (UInt8(ascii: "{"), UInt8(ascii: ","), UInt8(ascii: "}"))) { punctuation in
                hasher.update(bufferPointer: UnsafeRawBufferPointer(rebasing: punctuation[0..<1]))
                for (i, m) in order.enumerated() {
                    if i > 0 { hasher.update(bufferPointer: UnsafeRawBufferPointer(rebasing: punctuation[1..<2])) }
                    hasher.update(bufferPointer: UnsafeRawBufferPointer(rebasing: bytes[pieces[m]]))
                }
                hasher.update(bufferPointer: UnsafeRawBufferPointer(rebasing: punctuation[2..<3]))
            }
        }
    }

    public static func bytes(_ value: JSON) -> [UInt8] {
        var out = [UInt8]()
        write(value, into: &out)
        return out
    }
}
