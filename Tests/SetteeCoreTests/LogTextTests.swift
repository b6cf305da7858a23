import Logging
import SetteeCore
import Synchronization
import Testing

@Suite struct LogTextTests {
    /// Proves client text cannot forge log lines: newlines, carriage returns, other control characters and the
    /// Unicode line separators are escaped, and long values are cut. Before, a SASL user name "x\nFAKE LINE"
    /// was written raw.
    @Test func controlCharactersAreEscaped() {
        #expect(
            LogText.escaped("x\nFAKE line\r\t\u{1b}[31m\u{2028}\\") == "x\\nFAKE line\\r\\t\\u{1b}[31m\\u{2028}\\\\")
        #expect(LogText.quoted("a\"b") == "\"a\\\"b\"")
        let long = String(repeating: "k", count: Limits.maxLoggedValueLength * 2)
        #expect(LogText.escaped(long).count == Limits.maxLoggedValueLength + 1)
        #expect(!LogText.isPlainName("n_1@x\nforged", maxLength: 100))
        #expect(LogText.isPlainName("n_1@127.0.0.1", maxLength: 100))
    }

    /// Proves the three redaction levels (Sync Gateway's `log_redaction_level`): none writes the escaped
    /// value, partial wraps it in `<ud>…</ud>`, full replaces it with a stable checksum inside the tags.
    @Test func redactionLevels() {
        #expect(LogText.userData("alice\n", level: .none) == "alice\\n")
        #expect(LogText.userData("alice", level: .partial) == "<ud>alice</ud>")
        let full = LogText.userData("alice", level: .full)
        #expect(full.hasPrefix("<ud>#") && full.hasSuffix("</ud>") && !full.contains("alice"))
        #expect(full == LogText.userData("alice", level: .full))
        #expect(LogText.userData(bytes: Array("k1".utf8), level: .partial) == "<ud>k1</ud>")
    }
}

/// What `LineSafeLogHandler` hands its inner handler.
final class CapturingHandler: LogHandler, Sendable {
    let events = Mutex<[LogEvent]>([])
    var metadata: Logger.Metadata {
        get { [:] }
        set {}
    }
    var metadataProvider: Logger.MetadataProvider? {
        get { nil }
        set {}
    }
    var logLevel: Logger.Level {
        get { .trace }
        set {}
    }
    subscript(metadataKey _: String) -> Logger.Metadata.Value? {
        get { nil }
        set {}
    }
    func log(event: LogEvent) { events.withLock { $0.append(event) } }
}

@Suite struct LineSafeLogHandlerTests {
    /// Proves every part of an entry reaches the inner handler on one line: the message, the call's metadata (nested
    /// ones and string-convertible values too) and the handler's own metadata have control characters and U+2028
    /// escaped as `\u{…}`; text without them passes unchanged, backslashes included (no double escaping).
    @Test func everyPartOfAnEntryStaysOnOneLine() {
        let inner = CapturingHandler()
        var logger = Logger(label: "t") { _ in LineSafeLogHandler(inner) }
        logger[metadataKey: "conn"] = "a\nb"
        struct Name: CustomStringConvertible, Sendable { var description: String { "n\r\u{2028}" } }
        logger.info(
            "opened \("x\nFORGED")",
            metadata: [
                "name": "\("y\nz")", "nested": ["k": ["v\u{1b}"]], "typed": .stringConvertible(Name()),
                "plain": "c:\\dir",
            ])
        let events = inner.events.withLock { $0 }
        #expect(events.count == 1)
        guard let e = events.first else { return }
        #expect(e.message.description == #"opened x\u{a}FORGED"#)
        let m = e.metadata ?? [:]
        #expect(m["conn"] == .string(#"a\u{a}b"#))
        #expect(m["name"] == .string(#"y\u{a}z"#))
        #expect(m["nested"] == .dictionary(["k": .array([.string(#"v\u{1b}"#)])]))
        #expect(m["typed"] == .string(#"n\u{d}\u{2028}"#))
        #expect(m["plain"] == .string(#"c:\dir"#))
        #expect(LogText.lineSafe("plain") == "plain")
    }

    @Test func clippedKeepsWholeCharactersWithinTheBytes() {
        // Proves a message is cut at a character boundary within the byte bound: "é" is 2 bytes and "👍" 4, so 5
        // bytes of "aé👍" keep "aé" (3), never half the emoji; a text that fits comes back as it is.
        #expect(LogText.clipped("aé👍", toUTF8Bytes: 5) == "aé")
        #expect(LogText.clipped("aé👍", toUTF8Bytes: 7) == "aé👍")
        #expect(LogText.clipped("aé👍", toUTF8Bytes: 2) == "a")
        #expect(LogText.clipped("abc", toUTF8Bytes: 0) == "")
        let long = String(repeating: "é", count: 300)
        #expect(LogText.clipped(long, toUTF8Bytes: 255).utf8.count == 254)
    }
}
