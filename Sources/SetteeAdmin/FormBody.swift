import SetteeCore
import SetteeJSON

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

    /// `+` is a space in a form body; the rest is the shared percent-decoding.
    static func percentDecode(_ bytes: ArraySlice<UInt8>) throws(ParseError) -> String {
        let spaced = bytes.map { $0 == UInt8(ascii: "+") ? UInt8(ascii: " ") : $0 }
        guard let text = String(validating: spaced, as: UTF8.self), let decoded = PercentEncoding.decode(text) else {
            throw .malformed("bad percent-escape or not UTF-8 in form body")
        }
        return decoded
    }

    /// Parses a flat JSON object whose values are strings, numbers or booleans (`true` → `1`); a repeated
    /// key takes the last value, as in the URL-encoded form.
    static func parseJSON(_ bytes: [UInt8]) throws(ParseError) -> FormBody {
        let malformed = ParseError.malformed("body must be a JSON object of strings, numbers and booleans")
        guard let members = (try? JSON.parse(bytes))?.objectValue else { throw malformed }
        var fields: [String: String] = [:]
        for (key, value) in members {
            switch value {
            case .string(let s): fields[key] = s
            case .bool(let b): fields[key] = b ? "1" : "0"
            case .integer, .number: fields[key] = value.text
            case .null, .array, .object: throw malformed
            }
        }
        return FormBody(fields: fields)
    }

    /// Picks the parser from the content type; an empty body is an empty form.
    static func parse(_ bytes: [UInt8], contentType: String?) throws(ParseError) -> FormBody {
        if bytes.isEmpty { return FormBody(fields: [:]) }
        if let contentType, contentType.lowercased().hasPrefix("application/json") { return try parseJSON(bytes) }
        return try parseURLEncoded(bytes)
    }
}
