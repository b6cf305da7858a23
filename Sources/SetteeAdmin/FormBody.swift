import Foundation

/// A request's parameters: `application/x-www-form-urlencoded` (what Couchbase's API takes) or a flat
/// JSON object of scalars. Duplicate keys: the last one wins.
struct FormBody: Sendable, Equatable {
    var fields: [String: String]

    subscript(_ key: String) -> String? { fields[key] }

    enum ParseError: Error, Equatable {
        case malformed(String)
    }

    /// Parses `key=value&...` with `+` for space and `%XX` escapes.
    static func parseURLEncoded(_ bytes: [UInt8]) throws(ParseError) -> FormBody {
        var fields: [String: String] = [:]
        for pair in bytes.split(separator: UInt8(ascii: "&"), omittingEmptySubsequences: true) {
            let parts = pair.split(separator: UInt8(ascii: "="), maxSplits: 1, omittingEmptySubsequences: false)
            let key = try percentDecode(parts[0])
            let value = parts.count > 1 ? try percentDecode(parts[1]) : ""
            fields[key] = value
        }
        return FormBody(fields: fields)
    }

    static func percentDecode(_ bytes: ArraySlice<UInt8>) throws(ParseError) -> String {
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count)
        var i = bytes.startIndex
        while i < bytes.endIndex {
            let b = bytes[i]
            if b == UInt8(ascii: "+") {
                out.append(UInt8(ascii: " "))
            } else if b == UInt8(ascii: "%") {
                guard i + 2 < bytes.endIndex, let hi = hexValue(bytes[i + 1]), let lo = hexValue(bytes[i + 2])
                else { throw .malformed("bad percent-escape in form body") }
                out.append(hi << 4 | lo)
                i += 2
            } else {
                out.append(b)
            }
            i += 1
        }
        guard let s = String(validating: out, as: UTF8.self) else { throw .malformed("form body is not UTF-8") }
        return s
    }

    private static func hexValue(_ c: UInt8) -> UInt8? {
        switch c {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): c - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): c - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): c - UInt8(ascii: "A") + 10
        default: nil
        }
    }

    /// One JSON scalar, rendered as the form value it stands for (`true` → `1`).
    private struct Scalar: Decodable {
        var text: String
        init(from decoder: any Decoder) throws {
            let c = try decoder.singleValueContainer()
            if let s = try? c.decode(String.self) {
                text = s
            } else if let b = try? c.decode(Bool.self) {
                text = b ? "1" : "0"
            } else if let i = try? c.decode(Int64.self) {
                text = String(i)
            } else if let d = try? c.decode(Double.self) {
                text = String(d)
            } else {
                throw DecodingError.dataCorruptedError(in: c, debugDescription: "not a scalar")
            }
        }
    }

    /// Parses a flat JSON object whose values are strings, numbers or booleans.
    static func parseJSON(_ bytes: [UInt8]) throws(ParseError) -> FormBody {
        do {
            let object = try JSONDecoder().decode([String: Scalar].self, from: Data(bytes))
            return FormBody(fields: object.mapValues(\.text))
        } catch {
            throw .malformed("body must be a JSON object of strings, numbers and booleans")
        }
    }

    /// Picks the parser from the content type; an empty body is an empty form.
    static func parse(_ bytes: [UInt8], contentType: String?) throws(ParseError) -> FormBody {
        if bytes.isEmpty { return FormBody(fields: [:]) }
        if let contentType, contentType.lowercased().hasPrefix("application/json") { return try parseJSON(bytes) }
        return try parseURLEncoded(bytes)
    }
}
