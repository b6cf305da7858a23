import Foundation
import SetteeTestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// A HEAD of an answer the gateway streams (`_all_docs`, `_changes`, with and without `include_docs`): the status
/// and headers a GET gets, then nothing. A HEAD answer that carried a chunked body, or only its last chunk
/// (`0\r\n\r\n`), would be read by a keep-alive client as the start of its next answer. Two layers keep it so: the
/// gateway produces nothing for a HEAD (`GatewayReply`), and the HTTP encoder drops a HEAD answer's body (with the
/// gateway's HEAD branch removed this still passes); this pins what a client sees, whichever layer provides it.
@Suite struct HeadOfStreamedAnswerTests {
    static let config = """
        {"databases": {"db": {"server": "walrus:",
          "users": {"GUEST": {"disabled": false, "admin_channels": ["*"]}}}}}
        """

    static let streamed = [
        "/db/_all_docs", "/db/_all_docs?include_docs=true", "/db/_changes", "/db/_changes?include_docs=true",
        "/db/_changes?feed=normal&style=all_docs",
    ]

    /// Proves each HEAD is answered 200 with the GET's headers and no body byte, and that the same connection then
    /// answers a GET whose reply starts right where the HEAD's head ended. Fails if the HEAD's answer carries any
    /// byte after its head (the GET's status line would not come next).
    @Test(arguments: streamed)
    func aHeadOfAStreamedAnswerIsHeadersOnly(path: String) async throws {
        let gw = try await InProcessGateway.start(config: Self.config)
        for n in 0..<30 {
            let put = try await gw.request("PUT", "/db/d\(n)", body: #"{"n":\#(n)}"#, admin: false)
            #expect(put.status == 201)
        }
        let get = try await gw.request("GET", path, admin: false)
        #expect(get.status == 200)
        #expect(get.bytes.count > 100)

        // The socket is read off the cooperative pool: a blocking read on the test's task would hold one of the few
        // threads the in-process gateway's handlers need (five cases run at once).
        let port = gw.publicPort
        let reply = try await offPool {
            let c = try TestKVClient(port: port, timeoutSeconds: 10)
            try c.send(
                bytes: Array(
                    "HEAD \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\nGET /db/ HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".utf8)
            )
            return c.read { bytes in
                // Both heads, and the second answer's body (its Content-Length).
                let text = String(decoding: bytes, as: UTF8.self)
                let parts = text.components(separatedBy: "\r\n\r\n")
                guard parts.count >= 3,
                    let length = parts[1].split(separator: "\r\n").first(where: {
                        $0.lowercased().hasPrefix("content-length:")
                    })
                else { return false }
                let n = Int(length.split(separator: ":")[1].trimmingCharacters(in: .whitespaces)) ?? 0
                return parts[2...].joined(separator: "\r\n\r\n").utf8.count >= n
            }.bytes
        }
        let text = String(decoding: reply, as: UTF8.self)
        let heads = text.components(separatedBy: "\r\n\r\n")
        try #require(heads.count >= 3, "\(text)")
        #expect(heads[0].hasPrefix("HTTP/1.1 200"), "\(heads[0])")
        #expect(heads[0].lowercased().contains("content-type: application/json"), "\(heads[0])")
        // The next byte after the HEAD's head is the GET's status line.
        #expect(heads[1].hasPrefix("HTTP/1.1 200"), "after the HEAD's head: \(heads[1].prefix(80))")
        #expect(heads[2].contains("\"db_name\":\"db\""), "\(heads[2].prefix(200))")
        await gw.stop()
    }
}
