import SetteeJSON
import SetteeReplication
import Testing

@Suite struct MultipartTests {
    private func bytes(_ s: String) -> [UInt8] { Array(s.utf8) }

    // Proves a CouchDB-shaped multipart/related document (JSON first, attachment with Content-Disposition
    // after) parses into its parts with headers and exact bodies, preamble and epilogue ignored.
    @Test func couchDBRelatedDocument() throws {
        let body =
            "this is a preamble\r\n"
            + "--abc123\r\n"
            + "Content-Type: application/json\r\n\r\n"
            + #"{"_id":"doc","_rev":"2-x","_attachments":{"a.txt":{"follows":true,"length":5}}}"# + "\r\n"
            + "--abc123\r\n"
            + "Content-Disposition: attachment; filename=\"a.txt\"\r\n"
            + "Content-Type: text/plain\r\n"
            + "Content-Encoding: gzip\r\n\r\n"
            + "hello\r\n"
            + "--abc123--\r\nepilogue"
        let m = try Multipart.parse(bytes(body), contentType: "multipart/related; boundary=\"abc123\"")
        #expect(m.subtype == "related")
        #expect(m.parts.count == 2)
        #expect(m.parts[0].contentType?.isJSON == true)
        let doc = try JSON.parse(m.parts[0].body)
        #expect(doc["_id"]?.stringValue == "doc")
        #expect(m.parts[1].filename == "a.txt")
        #expect(m.parts[1].contentEncoding == "gzip")
        #expect(m.parts[1].body == bytes("hello"))
    }

    // Proves a Sync Gateway _bulk_get answer (multipart/mixed with X-Doc-ID/X-Rev-ID, an error part and a
    // nested multipart/related part) parses, including the nested level.
    @Test func syncGatewayBulkGetMixedWithNestedRelated() throws {
        let body =
            "--outer\r\n"
            + "Content-Type: application/json\r\nX-Doc-ID: d1\r\nX-Rev-ID: 1-a\r\n\r\n"
            + #"{"_id":"d1","_rev":"1-a"}"# + "\r\n"
            + "--outer\r\n"
            + "Content-Type: application/json; error=\"true\"\r\n\r\n"
            + #"{"id":"d2","error":"not_found","reason":"missing","status":404}"# + "\r\n"
            + "--outer\r\n"
            + "X-Doc-ID: d3\r\nX-Rev-ID: 2-b\r\n"
            + "Content-Type: multipart/related; boundary=inner\r\n\r\n"
            + "--inner\r\nContent-Type: application/json\r\n\r\n"
            + #"{"_id":"d3","_attachments":{"p.bin":{"follows":true}}}"# + "\r\n"
            + "--inner\r\nContent-Disposition: attachment; filename=\"p.bin\"\r\n\r\n"
            + "\u{00}\u{01}\r\n--not-the-boundary\r\n"
            + "--inner--\r\n"
            + "--outer--"
        let m = try Multipart.parse(bytes(body), contentType: "multipart/mixed; boundary=outer")
        #expect(m.parts.count == 3)
        #expect(m.parts[0].docID == "d1")
        #expect(m.parts[0].revID == "1-a")
        #expect(m.parts[0].isError == false)
        #expect(m.parts[1].isError)
        #expect(try m.parts[0].nested() == nil)
        let inner = try #require(try m.parts[2].nested())
        #expect(inner.subtype == "related")
        #expect(inner.parts.count == 2)
        #expect(inner.parts[1].filename == "p.bin")
        #expect(inner.parts[1].body == [0, 1, 0x0D, 0x0A] + bytes("--not-the-boundary"))
    }

    // Proves bare-LF line ends, empty bodies (with and without the CRLF before the delimiter), folded
    // headers and transport padding after a boundary are accepted.
    @Test func lenientEdgeCases() throws {
        let lf = "--b\nContent-Type: text/plain\n\nx\n--b\n\n\n--b--\n"
        let m1 = try Multipart.parse(bytes(lf), subtype: "mixed", boundary: "b")
        #expect(m1.parts.map(\.body) == [bytes("x"), []])
        #expect(m1.parts[0].header("content-type") == "text/plain")

        let tight = "--b  \r\nX-A: 1\r\n\r\n--b\r\nX-Long: one\r\n two\r\n\r\nbody\r\n--b--"
        let m2 = try Multipart.parse(bytes(tight), subtype: "mixed", boundary: "b")
        #expect(m2.parts.count == 2)
        #expect(m2.parts[0].body.isEmpty)
        #expect(m2.parts[1].header("X-Long") == "one two")
        #expect(m2.parts[1].body == bytes("body"))
    }

    // Proves malformed bodies are rejected: no boundary, no closing delimiter, header without a colon.
    @Test func rejectsMalformed() {
        #expect(throws: MultipartError.self) {
            try Multipart.parse(bytes("no parts here"), subtype: "mixed", boundary: "b")
        }
        #expect(throws: MultipartError.self) {
            try Multipart.parse(bytes("--b\r\n\r\nbody never closed"), subtype: "mixed", boundary: "b")
        }
        #expect(throws: MultipartError.self) {
            try Multipart.parse(bytes("--b\r\nNoColon\r\n\r\nx\r\n--b--"), subtype: "mixed", boundary: "b")
        }
        #expect(throws: MultipartError.self) { try Multipart.parse([], contentType: "application/json") }
    }

    // Proves writer output parses back to the same parts (also nested), and the header value names the boundary.
    @Test func writeThenParseRoundTrips() throws {
        let inner = Multipart(
            subtype: "related",
            parts: [
                MultipartPart(json: bytes(#"{"_id":"x"}"#)),
                MultipartPart(
                    headers: [("Content-Disposition", "attachment; filename=\"a b.png\"")], body: [0x0D, 0x0A]),
            ])
        let outer = Multipart(
            subtype: "mixed",
            parts: [
                MultipartPart(json: bytes("{}"), headers: [("X-Doc-ID", "d")]),
                MultipartPart(nested: inner),
            ])
        #expect(Multipart.boundary(fromContentType: outer.contentType) == outer.boundary)
        let parsed = try Multipart.parse(outer.serialized(), contentType: outer.contentType)
        #expect(parsed == outer)
        let nested = try #require(try parsed.parts[1].nested())
        #expect(nested == inner)
        #expect(nested.parts[1].filename == "a b.png")
    }

    // Proves the incremental parser yields the same parts whatever the chunking (byte by byte included),
    // including a delimiter split across chunks.
    @Test func incrementalFeedAnyChunking() throws {
        var parts: [MultipartPart] = []
        for i in 0..<5 {
            parts.append(
                MultipartPart(
                    headers: [("X-I", "\(i)")], body: (0..<(i * 97)).map { UInt8(truncatingIfNeeded: $0 * 7) }))
        }
        let m = Multipart(subtype: "mixed", boundary: "zz", parts: parts)
        let wire = m.serialized()
        for chunk in [1, 2, 3, 7, 64, wire.count] {
            var p = try MultipartParser(boundary: "zz")
            var got: [MultipartPart] = []
            var i = 0
            while i < wire.count {
                got += try p.feed(wire[i..<min(wire.count, i + chunk)])
                i += chunk
            }
            got += try p.finish()
            #expect(got == parts, "chunk size \(chunk)")
            #expect(p.isComplete)
        }
    }

    // Proves a 20 MiB attachment streams through in 64 KiB chunks with its bytes intact and in reasonable time.
    @Test func largeAttachmentStreams() throws {
        var big = [UInt8](repeating: 0, count: 20 * 1024 * 1024)
        var x: UInt32 = 12345
        for i in big.indices {
            x = x &* 1_103_515_245 &+ 12345
            big[i] = UInt8(truncatingIfNeeded: x >> 16)
        }
        let m = Multipart(
            subtype: "related",
            parts: [
                MultipartPart(json: bytes("{}")), MultipartPart(headers: [("Content-Type", "image/jpeg")], body: big),
            ]
        )
        let wire = m.serialized()
        var p = try MultipartParser(boundary: m.boundary)
        var got: [MultipartPart] = []
        var i = 0
        let clock = ContinuousClock()
        let t0 = clock.now
        while i < wire.count {
            got += try p.feed(wire[i..<min(wire.count, i + 65536)])
            i += 65536
        }
        _ = try p.finish()
        #expect(got.count == 2)
        #expect(got[1].body.count == big.count)
        #expect(got[1].body == big)
        #expect(clock.now - t0 < .seconds(30))
    }

    // Proves Content-Type parameters parse with quotes and escapes and print back quoted when needed.
    @Test func mediaTypeParameters() throws {
        let t = try #require(MediaType(#"Multipart/Mixed; Boundary="a \"q\" b"; charset=utf-8"#))
        #expect(t.essence == "multipart/mixed")
        #expect(t["boundary"] == #"a "q" b"#)
        #expect(t["CHARSET"] == "utf-8")
        #expect(MediaType(t.description) == t)
        let d = try #require(MediaType("attachment; filename=photo.jpg"))
        #expect(d.type == "attachment" && d["filename"] == "photo.jpg")
        #expect(MediaType("") == nil)
    }
}
