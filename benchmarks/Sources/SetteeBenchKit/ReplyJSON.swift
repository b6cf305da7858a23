/// A small JSON reader for the gateway's replies (`_revs_diff`, `_bulk_docs`, `_changes`, `_bulk_get`).
/// The benchmark package cannot see the root's internal JSON target and Foundation's parser is slow
/// on Linux; the client shares the cores with the server, so its parsing cost is part of every figure.
public indirect enum ReplyJSON: Sendable, Equatable {
    case null
    case bool(Bool)
    case number(Double)
    case string(String)
    case array([ReplyJSON])
    case object([(String, ReplyJSON)])

    public static func == (a: ReplyJSON, b: ReplyJSON) -> Bool {
        switch (a, b) {
        case (.null, .null): return true
        case (.bool(let x), .bool(let y)): return x == y
        case (.number(let x), .number(let y)): return x == y
        case (.string(let x), .string(let y)): return x == y
        case (.array(let x), .array(let y)): return x == y
        case (.object(let x), .object(let y)):
            return x.count == y.count && zip(x, y).allSatisfy { $0.0 == $1.0 && $0.1 == $1.1 }
        default: return false
        }
    }

    public subscript(key: String) -> ReplyJSON? {
        guard case .object(let members) = self else { return nil }
        return members.first { $0.0 == key }?.1
    }

    public var array: [ReplyJSON]? {
        if case .array(let a) = self { return a }
        return nil
    }

    public var string: String? {
        if case .string(let s) = self { return s }
        return nil
    }

    /// A number's or a string's text (`last_seq` is a string in Sync Gateway, a number in CouchDB).
    public var scalarText: String? {
        switch self {
        case .string(let s): return s
        case .number(let n): return n == n.rounded() && abs(n) < 1e15 ? String(Int64(n)) : String(n)
        default: return nil
        }
    }

    public struct ParseError: Error, CustomStringConvertible {
        public var offset: Int
        public var description: String { "invalid JSON at byte \(offset)" }
    }

    public static func parse(_ bytes: some Collection<UInt8>) throws(ParseError) -> ReplyJSON {
        var reader = Reader(bytes: Array(bytes))
        let value = try reader.value(depth: 0)
        reader.skipSpace()
        guard reader.i == reader.bytes.count else { throw ParseError(offset: reader.i) }
        return value
    }

    private struct Reader {
        let bytes: [UInt8]
        var i = 0

        mutating func skipSpace() {
            while i < bytes.count, bytes[i] == 0x20 || bytes[i] == 0x0A || bytes[i] == 0x0D || bytes[i] == 0x09 {
                i += 1
            }
        }

        mutating func expect(_ literal: String) throws(ParseError) {
            for b in literal.utf8 {
                guard i < bytes.count, bytes[i] == b else { throw ParseError(offset: i) }
                i += 1
            }
        }

        mutating func value(depth: Int) throws(ParseError) -> ReplyJSON {
            guard depth < 64 else { throw ParseError(offset: i) }
            skipSpace()
            guard i < bytes.count else { throw ParseError(offset: i) }
            switch bytes[i] {
            case UInt8(ascii: "{"):
                i += 1
                var members: [(String, ReplyJSON)] = []
                skipSpace()
                if i < bytes.count, bytes[i] == UInt8(ascii: "}") {
                    i += 1
                    return .object(members)
                }
                while true {
                    skipSpace()
                    let key = try string()
                    skipSpace()
                    try expect(":")
                    members.append((key, try value(depth: depth + 1)))
                    skipSpace()
                    guard i < bytes.count else { throw ParseError(offset: i) }
                    if bytes[i] == UInt8(ascii: ",") {
                        i += 1
                        continue
                    }
                    try expect("}")
                    return .object(members)
                }
            case UInt8(ascii: "["):
                i += 1
                var items: [ReplyJSON] = []
                skipSpace()
                if i < bytes.count, bytes[i] == UInt8(ascii: "]") {
                    i += 1
                    return .array(items)
                }
                while true {
                    items.append(try value(depth: depth + 1))
                    skipSpace()
                    guard i < bytes.count else { throw ParseError(offset: i) }
                    if bytes[i] == UInt8(ascii: ",") {
                        i += 1
                        continue
                    }
                    try expect("]")
                    return .array(items)
                }
            case UInt8(ascii: "\""): return .string(try string())
            case UInt8(ascii: "t"):
                try expect("true")
                return .bool(true)
            case UInt8(ascii: "f"):
                try expect("false")
                return .bool(false)
            case UInt8(ascii: "n"):
                try expect("null")
                return .null
            default: return .number(try number())
            }
        }

        mutating func number() throws(ParseError) -> Double {
            let start = i
            while i < bytes.count,
                (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[i]) || bytes[i] == UInt8(ascii: "-")
                    || bytes[i] == UInt8(ascii: "+") || bytes[i] == UInt8(ascii: ".") || bytes[i] == UInt8(ascii: "e")
                    || bytes[i] == UInt8(ascii: "E")
            {
                i += 1
            }
            guard i > start, let n = Double(String(decoding: bytes[start..<i], as: UTF8.self)) else {
                throw ParseError(offset: start)
            }
            return n
        }

        mutating func string() throws(ParseError) -> String {
            try expect("\"")
            var out: [UInt8] = []
            while i < bytes.count {
                let b = bytes[i]
                i += 1
                switch b {
                case UInt8(ascii: "\""): return String(decoding: out, as: UTF8.self)
                case UInt8(ascii: "\\"):
                    guard i < bytes.count else { throw ParseError(offset: i) }
                    let e = bytes[i]
                    i += 1
                    switch e {
                    case UInt8(ascii: "n"): out.append(0x0A)
                    case UInt8(ascii: "t"): out.append(0x09)
                    case UInt8(ascii: "r"): out.append(0x0D)
                    case UInt8(ascii: "b"): out.append(0x08)
                    case UInt8(ascii: "f"): out.append(0x0C)
                    case UInt8(ascii: "u"):
                        guard i + 4 <= bytes.count,
                            let code = UInt32(String(decoding: bytes[i..<i + 4], as: UTF8.self), radix: 16)
                        else { throw ParseError(offset: i) }
                        i += 4
                        // Surrogate pairs are not needed for the gateway's replies here; a lone one becomes U+FFFD.
                        let scalar = Unicode.Scalar(code) ?? "\u{FFFD}"
                        out.append(contentsOf: Array(String(Character(scalar)).utf8))
                    default: out.append(e)
                    }
                default: out.append(b)
                }
            }
            throw ParseError(offset: i)
        }
    }
}

/// Appends a JSON string literal (quoted, escaped) to `out`.
@inline(__always)
func appendJSONString(_ s: String, to out: inout [UInt8]) {
    out.append(UInt8(ascii: "\""))
    for b in s.utf8 {
        switch b {
        case UInt8(ascii: "\""): out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "\"")])
        case UInt8(ascii: "\\"): out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "\\")])
        case 0..<0x20:
            let hex = Array("0123456789abcdef".utf8)
            out.append(contentsOf: Array("\\u00".utf8))
            out.append(hex[Int(b >> 4)])
            out.append(hex[Int(b & 15)])
        default: out.append(b)
        }
    }
    out.append(UInt8(ascii: "\""))
}
