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
        guard !digest.isEmpty, digest.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else { return nil }
        self.init(generation: generation, digest: digest)
    }

    public var description: String { "\(generation)-\(digest)" }

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
        if let parent { bytes.append(contentsOf: parent.description.utf8) }
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
        let hash = Insecure.MD5.hash(data: bytes)
        let hex: [UInt8] = Array("0123456789abcdef".utf8)
        var text = [UInt8]()
        text.reserveCapacity(32)
        for byte in hash {
            text.append(hex[Int(byte >> 4)])
            text.append(hex[Int(byte & 0xF)])
        }
        return RevID(generation: generation, digest: String(decoding: text, as: UTF8.self))
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
            var order = Array(members.indices)
            order.sort { members[$0].0.utf8.lexicographicallyPrecedes(members[$1].0.utf8) }
            for (i, m) in order.enumerated() {
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

    public static func bytes(_ value: JSON) -> [UInt8] {
        var out = [UInt8]()
        write(value, into: &out)
        return out
    }
}
