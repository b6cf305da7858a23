import Synchronization

/// How much of user data (user names, document ids, bodies, URL paths) logs show, as Sync Gateway's
/// `log_redaction_level`: `none` writes it as is (escaped), `partial` wraps it in `<ud>…</ud>` so a collection
/// tool can strip it before logs leave the site, `full` replaces it with a checksum inside the tags (the same
/// value gives the same checksum, so lines can still be correlated).
public enum LogRedactionLevel: String, Sendable, CaseIterable {
    case none
    case partial
    case full
}

/// The one way client-controlled strings reach a log line. Every control character (and the Unicode line and
/// paragraph separators) is escaped, so a user name with a newline cannot forge a line; user data is marked
/// or hidden per `redactionLevel`.
public enum LogText {
    private static let level = Atomic<UInt8>(1)

    /// The process's level (default `partial`, Sync Gateway's default). Set once at start from a flag or config.
    public static var redactionLevel: LogRedactionLevel {
        get {
            switch level.load(ordering: .relaxed) {
            case 0: .none
            case 2: .full
            default: .partial
            }
        }
        set {
            let raw: UInt8 =
                switch newValue {
                case .none: 0
                case .partial: 1
                case .full: 2
                }
            level.store(raw, ordering: .relaxed)
        }
    }

    static var maxLoggedLength: Int { Limits.maxLoggedValueLength }

    /// `text` with control characters escaped (`\n`, `\r`, `\t`, `\\`, `\u{…}`), cut at `maxLoggedLength`.
    public static func escaped(_ text: some StringProtocol) -> String { escape(text, quote: false) }

    /// Escaped and in double quotes (for names inside error messages), with `"` escaped too.
    public static func quoted(_ text: some StringProtocol) -> String { "\"" + escape(text, quote: true) + "\"" }

    private static func escape(_ text: some StringProtocol, quote: Bool) -> String {
        var out = ""
        var count = 0
        for scalar in text.unicodeScalars {
            if count >= maxLoggedLength {
                out += "…"
                break
            }
            count += 1
            switch scalar {
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            case "\\": out += "\\\\"
            case "\"" where quote: out += "\\\""
            default:
                if isUnsafe(scalar) {
                    out += "\\u{" + String(scalar.value, radix: 16) + "}"
                } else {
                    out.unicodeScalars.append(scalar)
                }
            }
        }
        return out
    }

    /// User data for a log line: escaped, then marked or hidden per `level`.
    public static func userData(_ text: some StringProtocol, level: LogRedactionLevel = redactionLevel) -> String {
        switch level {
        case .none: return escaped(text)
        case .partial: return "<ud>" + escaped(text) + "</ud>"
        case .full:
            let sum = CRC32.checksum(Array(String(text).utf8))
            return "<ud>#" + String(sum, radix: 16) + "</ud>"
        }
    }

    /// User data given as bytes (a key from a frame): decoded as UTF-8 with replacement characters.
    public static func userData(bytes: some Collection<UInt8>, level: LogRedactionLevel = redactionLevel) -> String {
        userData(String(decoding: Array(bytes.prefix(maxLoggedLength * 4)), as: UTF8.self), level: level)
    }

    /// Whether `text` is a name that needs no escaping: non-empty, at most `maxLength` UTF-8 bytes, no control
    /// characters, no line separators. Used to refuse such names where they enter (cluster documents).
    public static func isPlainName(_ text: String, maxLength: Int) -> Bool {
        !text.isEmpty && text.utf8.count <= maxLength && !text.unicodeScalars.contains(where: isUnsafe)
    }

    /// `text` cut to at most `maxBytes` UTF-8 bytes at a character boundary (a message a bound in bytes keeps whole
    /// characters: a cut by characters could pass the bound, a cut by bytes could split one). The text itself when
    /// it fits.
    public static func clipped(_ text: String, toUTF8Bytes maxBytes: Int) -> String {
        guard text.utf8.count > maxBytes else { return text }
        var out = ""
        var bytes = 0
        for c in text {
            bytes += c.utf8.count
            if bytes > maxBytes { break }
            out.append(c)
        }
        return out
    }

    /// `text` with only what could break a log line escaped: control characters and U+2028/U+2029 as `\u{…}`;
    /// backslashes and length are left alone (unlike `escaped`, so an escaped value is not escaped again). The text
    /// itself when there is nothing to escape. What `LineSafeLogHandler` applies to every entry.
    public static func lineSafe(_ text: String) -> String {
        guard text.unicodeScalars.contains(where: isUnsafe) else { return text }
        var out = String.UnicodeScalarView()
        for scalar in text.unicodeScalars {
            if isUnsafe(scalar) {
                out.append(contentsOf: ("\\u{" + String(scalar.value, radix: 16) + "}").unicodeScalars)
            } else {
                out.append(scalar)
            }
        }
        return String(out)
    }

    static func isUnsafe(_ s: Unicode.Scalar) -> Bool {
        s.value < 0x20 || (0x7f...0x9f).contains(s.value) || s.value == 0x2028 || s.value == 0x2029
    }
}
