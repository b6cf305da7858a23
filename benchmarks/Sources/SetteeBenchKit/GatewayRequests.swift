import SetteeCore
import SetteeJSON

/// The request bodies a replicator sends, built as bytes (no Foundation JSON): what the push and pull
/// phases put on the wire, kept pure so they can be checked without a server.
public enum GatewayRequests {
    /// The benchmark's documents: `<prefix>-<index>` with one generation-1 revision whose digest is
    /// derived from the id, so a re-run of the same prefix finds them already present.
    public struct DocSet: Sendable {
        public var prefix: String
        public var count: Int
        /// Approximate JSON size of each document, `_revisions` included.
        public var docSize: Int

        public init(prefix: String, count: Int, docSize: Int) {
            self.prefix = prefix
            self.count = count
            self.docSize = docSize
        }

        public func id(_ i: Int) -> String {
            var n = String(i)
            while n.count < 6 { n = "0" + n }
            return prefix + "-" + n
        }

        /// 32 hex digits (an MD5-sized digest, as Couchbase Lite and Sync Gateway write them).
        public func digest(_ i: Int) -> String {
            var rng = SplitMix64(seed: fnv1a(prefix) ^ UInt64(i) &* 0x9E37_79B9_7F4A_7C15)
            return hex64(rng.next()) + hex64(rng.next())
        }

        public func rev(_ i: Int) -> String { "1-" + digest(i) }
    }

    /// `{"id": ["1-..."], ...}` for documents `range`.
    public static func revsDiff(_ set: DocSet, _ range: Range<Int>) -> [UInt8] {
        var out: [UInt8] = [UInt8(ascii: "{")]
        for i in range {
            if i > range.lowerBound { out.append(UInt8(ascii: ",")) }
            JSON.writeString(set.id(i), into: &out)
            out.append(contentsOf: Array(":[".utf8))
            JSON.writeString(set.rev(i), into: &out)
            out.append(UInt8(ascii: "]"))
        }
        out.append(UInt8(ascii: "}"))
        return out
    }

    /// One document as pushed with `new_edits=false`: `_id`, `_rev`, `_revisions`, a channel, padding.
    public static func document(_ set: DocSet, _ i: Int, into out: inout [UInt8]) {
        let start = out.count
        out.append(contentsOf: Array("{\"_id\":".utf8))
        JSON.writeString(set.id(i), into: &out)
        out.append(contentsOf: Array(",\"_rev\":".utf8))
        JSON.writeString(set.rev(i), into: &out)
        out.append(contentsOf: Array(",\"_revisions\":{\"start\":1,\"ids\":[".utf8))
        JSON.writeString(set.digest(i), into: &out)
        out.append(contentsOf: Array("]},\"type\":\"bench\",\"channels\":[\"bench\"],\"n\":\(i),\"pad\":\"".utf8))
        // Pad to the requested size: the closing `"}` are the last two bytes.
        let pad = max(0, set.docSize - (out.count - start) - 2)
        for k in 0..<pad { out.append(UInt8(ascii: "a") + UInt8(k % 26)) }
        out.append(contentsOf: Array("\"}".utf8))
    }

    /// `{"new_edits":false,"docs":[...]}` for the documents at `indices`.
    public static func bulkDocs(_ set: DocSet, _ indices: [Int]) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(indices.count * (set.docSize + 8) + 40)
        out.append(contentsOf: Array("{\"new_edits\":false,\"docs\":[".utf8))
        for (k, i) in indices.enumerated() {
            if k > 0 { out.append(UInt8(ascii: ",")) }
            document(set, i, into: &out)
        }
        out.append(contentsOf: Array("]}".utf8))
        return out
    }

    /// `{"docs":[{"id":..,"rev":..}, ...]}` for `_bulk_get`.
    public static func bulkGet(_ items: [(id: String, rev: String)]) -> [UInt8] {
        var out: [UInt8] = Array("{\"docs\":[".utf8)
        for (k, item) in items.enumerated() {
            if k > 0 { out.append(UInt8(ascii: ",")) }
            out.append(contentsOf: Array("{\"id\":".utf8))
            JSON.writeString(item.id, into: &out)
            out.append(contentsOf: Array(",\"rev\":".utf8))
            JSON.writeString(item.rev, into: &out)
            out.append(UInt8(ascii: "}"))
        }
        out.append(contentsOf: Array("]}".utf8))
        return out
    }

    /// Percent-encodes a query value (`since` may be a compound `a:b` or a string).
    public static func queryValue(_ s: String) -> String {
        var out = ""
        for b in s.utf8 {
            switch b {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
                UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "_"), UInt8(ascii: "."),
                UInt8(ascii: "~"):
                out.unicodeScalars.append(Unicode.Scalar(b))
            default:
                let hex = Array("0123456789ABCDEF".unicodeScalars)
                out += "%" + String(hex[Int(b >> 4)]) + String(hex[Int(b & 15)])
            }
        }
        return out
    }

    static func fnv1a(_ s: String) -> UInt64 {
        var h: UInt64 = 0xcbf2_9ce4_8422_2325
        for b in s.utf8 { h = (h ^ UInt64(b)) &* 0x100_0000_01b3 }
        return h
    }

    static func hex64(_ v: UInt64) -> String {
        let digits = Array("0123456789abcdef".utf8)
        var out = [UInt8](repeating: 0, count: 16)
        for k in 0..<16 { out[15 - k] = digits[Int(v >> (UInt64(k) * 4) & 15)] }
        return String(decoding: out, as: UTF8.self)
    }
}
