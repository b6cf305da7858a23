/// A parsed header value of the shape `type/subtype; name=value; name="quoted value"` (RFC 2045 §5.1), as
/// `Content-Type` carries it; also the `disposition; filename="x"` shape of `Content-Disposition`
/// (then `subtype` is empty). Type and parameter names are lower-cased; values keep their case.
public struct MediaType: Sendable, Equatable, CustomStringConvertible {
    /// `multipart`, `application`, ... or the disposition (`attachment`, `inline`, `form-data`).
    public var type: String
    /// `mixed`, `related`, `json`, ... (empty when the value has no `/`).
    public var subtype: String
    /// Parameters in the order given; names lower-cased, quotes and backslash escapes removed.
    public var parameters: [(String, String)]

    public init(type: String, subtype: String, parameters: [(String, String)] = []) {
        self.type = type.lowercased()
        self.subtype = subtype.lowercased()
        self.parameters = parameters
    }

    public static func == (a: MediaType, b: MediaType) -> Bool {
        a.type == b.type && a.subtype == b.subtype && a.parameters.count == b.parameters.count
            && zip(a.parameters, b.parameters).allSatisfy { $0.0 == $1.0 && $0.1 == $1.1 }
    }

    /// The value of parameter `name` (case-insensitive), nil when absent.
    public subscript(_ name: String) -> String? {
        let lower = name.lowercased()
        return parameters.first { $0.0 == lower }?.1
    }

    /// `type/subtype` without parameters.
    public var essence: String { subtype.isEmpty ? type : "\(type)/\(subtype)" }

    public var isMultipart: Bool { type == "multipart" }

    public var isJSON: Bool { type == "application" && subtype == "json" }

    /// Parses a header value; nil when it has no type at all.
    public init?(_ text: String) {
        var scanner = HeaderScanner(Array(text.utf8))
        scanner.skipSpace()
        let head = scanner.token(stoppingAt: [UInt8(ascii: ";")])
        guard !head.isEmpty else { return nil }
        if let slash = head.firstIndex(of: "/") {
            type = String(head[..<slash]).trimmed.lowercased()
            subtype = String(head[head.index(after: slash)...]).trimmed.lowercased()
        } else {
            type = head.trimmed.lowercased()
            subtype = ""
        }
        parameters = []
        while scanner.consume(UInt8(ascii: ";")) {
            scanner.skipSpace()
            let name = scanner.token(stoppingAt: [UInt8(ascii: "="), UInt8(ascii: ";")]).trimmed.lowercased()
            var value = ""
            if scanner.consume(UInt8(ascii: "=")) {
                scanner.skipSpace()
                value = scanner.peek == UInt8(ascii: "\"") ? scanner.quoted() : scanner.token(stoppingAt: [59]).trimmed
            }
            if !name.isEmpty { parameters.append((name, value)) }
        }
    }

    /// The header value, quoting parameter values that need it.
    public var description: String {
        var out = essence
        for (name, value) in parameters {
            out += "; \(name)="
            let plain =
                !value.isEmpty
                && value.utf8.allSatisfy { c in
                    c > 0x20 && c < 0x7F && !"()<>@,;:\\\"/[]?=".utf8.contains(c)
                }
            if plain {
                out += value
            } else {
                out += "\""
                for ch in value {
                    if ch == "\"" || ch == "\\" { out += "\\" }
                    out.append(ch)
                }
                out += "\""
            }
        }
        return out
    }
}

/// Byte scanner for header values: tokens, quoted strings, separators.
struct HeaderScanner {
    let bytes: [UInt8]
    var index = 0

    init(_ bytes: [UInt8]) { self.bytes = bytes }

    var peek: UInt8? { index < bytes.count ? bytes[index] : nil }

    mutating func skipSpace() {
        while let c = peek, c == 0x20 || c == 0x09 { index += 1 }
    }

    mutating func consume(_ c: UInt8) -> Bool {
        skipSpace()
        guard peek == c else { return false }
        index += 1
        return true
    }

    /// Bytes up to (not including) one of `stops` or the end.
    mutating func token(stoppingAt stops: [UInt8]) -> String {
        let start = index
        while let c = peek, !stops.contains(c) { index += 1 }
        return String(decoding: bytes[start..<index], as: UTF8.self)
    }

    /// A quoted string starting at the opening quote; backslash escapes removed; tolerates a missing close.
    mutating func quoted() -> String {
        index += 1
        var out: [UInt8] = []
        while let c = peek {
            index += 1
            if c == UInt8(ascii: "\"") { break }
            if c == UInt8(ascii: "\\"), let next = peek {
                out.append(next)
                index += 1
            } else {
                out.append(c)
            }
        }
        return String(decoding: out, as: UTF8.self)
    }
}

extension String {
    var trimmed: String {
        var s = Substring(self)
        while let f = s.first, f == " " || f == "\t" { s = s.dropFirst() }
        while let l = s.last, l == " " || l == "\t" { s = s.dropLast() }
        return String(s)
    }
}
