import SetteeCore
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
