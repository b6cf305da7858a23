import SetteeTLS
import Testing

/// `SyncURLPin`: the one parser of a sync URL's `cert` parameter.
@Suite struct SyncURLPinTests {
    static let hex = String(repeating: "0a", count: 32)

    @Test func thePinIsTakenOutOfTheURLAndNormalized() throws {
        // Proves the pin leaves the URL (other parameters kept, no dangling `?`), and every spelling a URL may carry
        // (sha256:, bare hex, openssl's colons, upper case, a percent-encoded colon) becomes `sha256:<lowercase hex>`.
        let only = try SyncURLPin("wss://u:p@127.0.0.1:4984/db?cert=sha256:\(Self.hex)")
        #expect(only.url == "wss://u:p@127.0.0.1:4984/db")
        #expect(only.fingerprint == "sha256:\(Self.hex)")
        let among = try SyncURLPin("https://h:1/db?a=1&cert=\(Self.hex.uppercased())&b=2")
        #expect(among.url == "https://h:1/db?a=1&b=2")
        #expect(among.fingerprint == "sha256:\(Self.hex)")
        let colons = Array(Self.hex).chunks(2).joined(separator: ":")
        #expect(try SyncURLPin("wss://h/db?cert=sha256%3A\(colons)").fingerprint == "sha256:\(Self.hex)")
        let none = try SyncURLPin("ws://h:4984/db?x=1")
        #expect(none.url == "ws://h:4984/db?x=1" && none.fingerprint == nil)
        let bare = try SyncURLPin("ws://h/db")
        #expect(bare.url == "ws://h/db" && bare.fingerprint == nil)
    }

    @Test func aMalformedOrSecondPinIsRefused() {
        #expect(throws: TLSSetupError.self) { try SyncURLPin("wss://h/db?cert=sha256:1234") }
        #expect(throws: TLSSetupError.self) { try SyncURLPin("wss://h/db?cert=md5:\(Self.hex)") }
        #expect(throws: TLSSetupError.self) { try SyncURLPin("wss://h/db?cert=\(Self.hex)&cert=\(Self.hex)") }
    }
}

extension Array where Element == Character {
    fileprivate func chunks(_ n: Int) -> [String] {
        stride(from: 0, to: count, by: n).map { String(self[$0..<Swift.min($0 + n, count)]) }
    }
}
