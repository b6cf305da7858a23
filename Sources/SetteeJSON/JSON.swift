import SetteeCore

/// A parsed JSON value, shared by views (emitted keys and values, query parameters, design documents),
/// the sync gateway and Lite (document bodies, REST requests). Object members keep their order
/// (CouchDB collation compares objects member by member in emitted order, output echoes input order,
/// and revision ids digest the body as written). Numbers are doubles, as in JavaScript.
public indirect enum JSON: Sendable, Equatable {
    case null
    case bool(Bool)
    case number(Double)
    case string(String)
    case array([JSON])
    case object([(String, JSON)])

    public static func == (a: JSON, b: JSON) -> Bool {
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

    /// Member `name` of an object (first match), nil otherwise.
    public subscript(_ name: String) -> JSON? {
        guard case .object(let members) = self else { return nil }
        return members.first { $0.0 == name }?.1
    }

    public var stringValue: String? {
        if case .string(let s) = self { return s }
        return nil
    }

    public var boolValue: Bool? {
        if case .bool(let b) = self { return b }
        return nil
    }

    public var arrayValue: [JSON]? {
        if case .array(let a) = self { return a }
        return nil
    }

    public var objectValue: [(String, JSON)]? {
        if case .object(let o) = self { return o }
        return nil
    }

    /// The number when it is integral and fits an `Int`, else nil.
    public var intValue: Int? {
        guard case .number(let d) = self, d.rounded() == d, abs(d) < 9.0e15 else { return nil }
        return Int(d)
    }

    public var isNull: Bool {
        if case .null = self { return true }
        return false
    }

    /// Sets (replacing in place, or appending) or, with nil, removes member `name` of an object;
    /// does nothing to other values.
    public mutating func set(_ name: String, _ value: JSON?) {
        guard case .object(var members) = self else { return }
        if let i = members.firstIndex(where: { $0.0 == name }) {
            if let value { members[i].1 = value } else { members.remove(at: i) }
        } else if let value {
            members.append((name, value))
        }
        self = .object(members)
    }

    public var numberValue: Double? {
        if case .number(let d) = self { return d }
        return nil
    }

    // MARK: Serialisation

    /// Compact UTF-8 JSON.
    public func serialized() -> [UInt8] {
        var out: [UInt8] = []
        write(into: &out)
        return out
    }

    public var text: String { String(decoding: serialized(), as: UTF8.self) }

    public func write(into out: inout [UInt8]) {
        switch self {
        case .null: out.append(contentsOf: "null".utf8)
        case .bool(let b): out.append(contentsOf: (b ? "true" : "false").utf8)
        case .number(let d): Self.writeNumber(d, into: &out)
        case .string(let s): Self.writeString(s, into: &out)
        case .array(let items):
            out.append(UInt8(ascii: "["))
            for (i, item) in items.enumerated() {
                if i > 0 { out.append(UInt8(ascii: ",")) }
                item.write(into: &out)
            }
            out.append(UInt8(ascii: "]"))
        case .object(let members):
            out.append(UInt8(ascii: "{"))
            for (i, (key, value)) in members.enumerated() {
                if i > 0 { out.append(UInt8(ascii: ",")) }
                Self.writeString(key, into: &out)
                out.append(UInt8(ascii: ":"))
                value.write(into: &out)
            }
            out.append(UInt8(ascii: "}"))
        }
    }

    /// Integers up to 2^53 print without a fraction (as JavaScript's `JSON.stringify` does).
    public static func writeNumber(_ d: Double, into out: inout [UInt8]) {
        if !d.isFinite {
            out.append(contentsOf: "null".utf8)
        } else if d == d.rounded(), abs(d) < 9_007_199_254_740_992 {
            out.append(contentsOf: String(Int64(d)).utf8)
        } else {
            out.append(contentsOf: "\(d)".utf8)
        }
    }

    private static let hex: [UInt8] = Array("0123456789abcdef".utf8)

    public static func writeString(_ s: String, into out: inout [UInt8]) {
        out.append(UInt8(ascii: "\""))
        for byte in s.utf8 {
            switch byte {
            case UInt8(ascii: "\""): out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "\"")])
            case UInt8(ascii: "\\"): out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "\\")])
            case 0x0A: out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "n")])
            case 0x0D: out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "r")])
            case 0x09: out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "t")])
            case 0..<0x20:
                out.append(contentsOf: Array("\\u00".utf8))
                out.append(hex[Int(byte >> 4)])
                out.append(hex[Int(byte & 0xF)])
            default: out.append(byte)
            }
        }
        out.append(UInt8(ascii: "\""))
    }

    // MARK: Parsing

    /// Parses UTF-8 JSON text (whole input, surrounding whitespace allowed).
    public static func parse(_ bytes: [UInt8]) throws(JSONError) -> JSON {
        try bytes.withUnsafeBufferPointer { buf throws(JSONError) in
            var p = JSONParser(bytes: buf)
            let v = try p.value(depth: 0)
            p.skipWhitespace()
            guard p.index == buf.count else { throw JSONError(offset: p.index, reason: "trailing characters") }
            return v
        }
    }

    public static func parse(_ text: String) throws(JSONError) -> JSON { try parse(Array(text.utf8)) }
}

/// Invalid JSON: where and why.
public struct JSONError: Error, Sendable, Equatable, CustomStringConvertible {
    public var offset: Int
    public var reason: String
    public var description: String { "invalid JSON at byte \(offset): \(reason)" }
}

private struct JSONParser {
    let bytes: UnsafeBufferPointer<UInt8>
    var index = 0

    init(bytes: UnsafeBufferPointer<UInt8>) { self.bytes = bytes }

    func fail(_ reason: String) -> JSONError { JSONError(offset: index, reason: reason) }

    mutating func skipWhitespace() {
        while index < bytes.count {
            switch bytes[index] {
            case 0x20, 0x09, 0x0A, 0x0D: index += 1
            default: return
            }
        }
    }

    mutating func value(depth: Int) throws(JSONError) -> JSON {
        guard depth <= Limits.maxJSONDepth else { throw fail("nested deeper than \(Limits.maxJSONDepth)") }
        skipWhitespace()
        guard index < bytes.count else { throw fail("unexpected end") }
        switch bytes[index] {
        case UInt8(ascii: "n"): try literal("null"); return .null
        case UInt8(ascii: "t"): try literal("true"); return .bool(true)
        case UInt8(ascii: "f"): try literal("false"); return .bool(false)
        case UInt8(ascii: "\""): return .string(try string())
        case UInt8(ascii: "["):
            index += 1
            var items: [JSON] = []
            skipWhitespace()
            if index < bytes.count, bytes[index] == UInt8(ascii: "]") {
                index += 1
                return .array(items)
            }
            while true {
                items.append(try value(depth: depth + 1))
                skipWhitespace()
                guard index < bytes.count else { throw fail("unterminated array") }
                if bytes[index] == UInt8(ascii: ",") {
                    index += 1
                } else if bytes[index] == UInt8(ascii: "]") {
                    index += 1
                    return .array(items)
                } else {
                    throw fail("expected , or ]")
                }
            }
        case UInt8(ascii: "{"):
            index += 1
            var members: [(String, JSON)] = []
            skipWhitespace()
            if index < bytes.count, bytes[index] == UInt8(ascii: "}") {
                index += 1
                return .object(members)
            }
            while true {
                skipWhitespace()
                guard index < bytes.count, bytes[index] == UInt8(ascii: "\"") else { throw fail("expected key") }
                let key = try string()
                skipWhitespace()
                guard index < bytes.count, bytes[index] == UInt8(ascii: ":") else { throw fail("expected :") }
                index += 1
                members.append((key, try value(depth: depth + 1)))
                skipWhitespace()
                guard index < bytes.count else { throw fail("unterminated object") }
                if bytes[index] == UInt8(ascii: ",") {
                    index += 1
                } else if bytes[index] == UInt8(ascii: "}") {
                    index += 1
                    return .object(members)
                } else {
                    throw fail("expected , or }")
                }
            }
        default:
            return .number(try number())
        }
    }

    mutating func literal(_ word: StaticString) throws(JSONError) {
        let n = word.utf8CodeUnitCount
        guard index + n <= bytes.count else { throw fail("unexpected end") }
        for i in 0..<n where bytes[index + i] != word.utf8Start[i] { throw fail("invalid literal") }
        index += n
    }

    mutating func number() throws(JSONError) -> Double {
        let start = index
        if index < bytes.count, bytes[index] == UInt8(ascii: "-") { index += 1 }
        var digits = 0
        while index < bytes.count {
            let c = bytes[index]
            if (c >= 0x30 && c <= 0x39) || c == UInt8(ascii: ".") || c == UInt8(ascii: "e") || c == UInt8(ascii: "E")
                || c == UInt8(ascii: "+") || c == UInt8(ascii: "-")
            {
                if c >= 0x30 && c <= 0x39 { digits += 1 }
                index += 1
            } else {
                break
            }
        }
        guard digits > 0 else { throw fail("invalid value") }
        let text = String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<index]), as: UTF8.self)
        guard let d = Double(text) else { throw fail("invalid number") }
        return d
    }

    mutating func hex4() throws(JSONError) -> UInt32 {
        guard index + 4 <= bytes.count else { throw fail("short \\u escape") }
        var v: UInt32 = 0
        for _ in 0..<4 {
            let c = bytes[index]
            index += 1
            v <<= 4
            switch c {
            case 0x30...0x39: v |= UInt32(c - 0x30)
            case 0x61...0x66: v |= UInt32(c - 0x61 + 10)
            case 0x41...0x46: v |= UInt32(c - 0x41 + 10)
            default: throw fail("bad \\u escape")
            }
        }
        return v
    }

    mutating func string() throws(JSONError) -> String {
        index += 1  // opening quote
        let start = index
        // Fast path: no escapes.
        while index < bytes.count {
            let c = bytes[index]
            if c == UInt8(ascii: "\"") {
                let s = String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<index]), as: UTF8.self)
                index += 1
                return s
            }
            if c == UInt8(ascii: "\\") { break }
            if c < 0x20 { throw fail("control character in string") }
            index += 1
        }
        var out = Array(bytes[start..<index])
        while index < bytes.count {
            let c = bytes[index]
            index += 1
            switch c {
            case UInt8(ascii: "\""): return String(decoding: out, as: UTF8.self)
            case UInt8(ascii: "\\"):
                guard index < bytes.count else { throw fail("unterminated escape") }
                let e = bytes[index]
                index += 1
                switch e {
                case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): out.append(e)
                case UInt8(ascii: "b"): out.append(0x08)
                case UInt8(ascii: "f"): out.append(0x0C)
                case UInt8(ascii: "n"): out.append(0x0A)
                case UInt8(ascii: "r"): out.append(0x0D)
                case UInt8(ascii: "t"): out.append(0x09)
                case UInt8(ascii: "u"):
                    var code = try hex4()
                    if code >= 0xD800 && code < 0xDC00, index + 6 <= bytes.count, bytes[index] == UInt8(ascii: "\\"),
                        bytes[index + 1] == UInt8(ascii: "u")
                    {
                        index += 2
                        let low = try hex4()
                        if low >= 0xDC00 && low < 0xE000 {
                            code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00)
                        } else {
                            code = 0xFFFD
                        }
                    }
                    let scalar = Unicode.Scalar(code) ?? "\u{FFFD}"
                    out.append(contentsOf: Array(String(Character(scalar)).utf8))
                default: throw fail("bad escape")
                }
            default:
                if c < 0x20 { throw fail("control character in string") }
                out.append(c)
            }
        }
        throw fail("unterminated string")
    }
}
