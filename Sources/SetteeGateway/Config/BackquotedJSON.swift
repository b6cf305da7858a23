import SetteeJSON

/// Sync Gateway config files may hold strings between backquotes (`` `function(doc) {...}` ``), usually
/// a JavaScript function over several lines. `BackquotedJSON.convert` turns each into a standard JSON
/// string (escaping `"`, `\` and control characters) and leaves everything else alone, so the result
/// parses with `JSON.parse`. Backquotes inside ordinary JSON strings are not delimiters. There is no
/// escape inside a backquoted string (as in Sync Gateway): it ends at the next backquote.
public enum BackquotedJSON {
    /// The config text with every backquoted string rewritten as a JSON string; `.unterminated` with the
    /// byte offset of the opening backquote when one is never closed.
    public static func convert(_ input: [UInt8]) throws(BackquoteError) -> [UInt8] {
        guard input.contains(UInt8(ascii: "`")) else { return input }
        var out: [UInt8] = []
        out.reserveCapacity(input.count + 64)
        var i = 0
        var inString = false
        while i < input.count {
            let b = input[i]
            if inString {
                out.append(b)
                if b == UInt8(ascii: "\\"), i + 1 < input.count {
                    out.append(input[i + 1])
                    i += 2
                    continue
                }
                if b == UInt8(ascii: "\"") { inString = false }
                i += 1
                continue
            }
            switch b {
            case UInt8(ascii: "\""):
                inString = true
                out.append(b)
                i += 1
            case UInt8(ascii: "`"):
                guard let close = input[(i + 1)...].firstIndex(of: UInt8(ascii: "`")) else {
                    throw BackquoteError(offset: i)
                }
                appendEscaped(input[(i + 1)..<close], to: &out)
                i = close + 1
            default:
                out.append(b)
                i += 1
            }
        }
        return out
    }

    /// The backquoted text as a JSON string literal (SetteeJSON's escaping).
    private static func appendEscaped(_ bytes: ArraySlice<UInt8>, to out: inout [UInt8]) {
        JSON.writeString(String(decoding: bytes, as: UTF8.self), into: &out)
    }
}

/// A backquote that opens a string never closed.
public struct BackquoteError: Error, Sendable, Equatable {
    /// Byte offset of the opening backquote.
    public var offset: Int
    public init(offset: Int) { self.offset = offset }
}
