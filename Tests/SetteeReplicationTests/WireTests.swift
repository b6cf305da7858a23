import SetteeCore
import SetteeJSON
import SetteeReplication
import Testing

@Suite struct WireTests {
    // Proves _changes answers parse with numeric and compound string sequences kept opaque, `removed`,
    // `deleted`, all_docs leaves, and that continuous lines (with heartbeats and last_seq) parse too.
    @Test func changesBatches() throws {
        let text = """
            {"results":[
            {"seq":1,"id":"a","changes":[{"rev":"1-a"}]},
            {"seq":"5:12","id":"b","deleted":true,"removed":["x"],"changes":[{"rev":"2-b"},{"rev":"2-c"}]},
            {"seq":13,"id":"_user/jane","changes":[]}
            ],
            "last_seq":"13"}
            """
        let batch = try ChangesBatch(json: try JSON.parse(text))
        #expect(batch.rows.count == 3)
        #expect(batch.rows[1].seq.description == "5:12")
        #expect(batch.rows[0].seq.description == "1")
        #expect(batch.rows[1].revs == ["2-b", "2-c"] && batch.rows[1].deleted && batch.rows[1].removed == ["x"])
        #expect(batch.rows[2].isUserRow)
        #expect(batch.lastSeq?.description == "13")
        let again = try ChangesBatch(json: try JSON.parse(batch.json().serialized()))
        #expect(again == batch)

        let lines = Array(
            "{\"seq\":1,\"id\":\"a\",\"changes\":[{\"rev\":\"1-a\"}]}\n\n{\"seq\":2,\"id\":\"b\",\"changes\":[{\"rev\":\"1-b\"}]}\n{\"last_seq\":2}\n"
                .utf8)
        let c = try ChangesBatch(continuousLines: lines)
        #expect(c.rows.map(\.id) == ["a", "b"] && c.lastSeq == SequenceID(2))
    }

    // Proves _revs_diff answers keep only documents missing something, with possible ancestors.
    @Test func revsDiff() throws {
        let answer = try RevsDiff.parseAnswer(
            try JSON.parse(#"{"a":{"missing":["2-x"],"possible_ancestors":["1-a"]},"b":{"missing":[]}}"#))
        #expect(answer.count == 1)
        #expect(answer["a"] == RevsDiffEntry(missing: ["2-x"], possibleAncestors: ["1-a"]))
        #expect(try RevsDiff.parseAnswer(RevsDiff.answerJSON(answer)) == answer)
        #expect(RevsDiff.requestJSON(["b": ["1-b"], "a": ["1-a", "2-a"]]).text == #"{"a":["1-a","2-a"],"b":["1-b"]}"#)
        #expect(try RevsDiff.parseRequest(RevsDiff.requestJSON(["a": ["1-a"]])) == ["a": ["1-a"]])
    }

    // Proves CouchDB 2's JSON _bulk_get answer parses: ok entries with inline attachments decoded into
    // bytes (entry marked follows), error entries as per-revision errors.
    @Test func bulkGetJSONAnswer() throws {
        let text = """
            {"results":[{"id":"a","docs":[{"ok":{"_id":"a","_rev":"2-b","_revisions":{"start":2,"ids":["b","a"]},
              "_attachments":{"t.txt":{"content_type":"text/plain","digest":"sha1-x","revpos":2,"data":"aGVsbG8="},
                              "old.txt":{"stub":true,"revpos":1,"digest":"sha1-y","length":3}}}}]},
             {"id":"z","docs":[{"error":{"id":"z","rev":"1-z","error":"not_found","reason":"missing"}}]}]}
            """
        let revs = try BulkGet.parseJSONAnswer(try JSON.parse(text))
        #expect(revs.count == 2)
        #expect(revs[0].id == "a" && revs[0].rev == "2-b" && revs[0].error == nil)
        #expect(revs[0].attachments["t.txt"] == Array("hello".utf8))
        #expect(revs[0].attachments["old.txt"] == nil)
        #expect(revs[0].body["_attachments"]?["t.txt"]?["follows"]?.boolValue == true)
        #expect(revs[0].body["_attachments"]?["t.txt"]?["data"] == nil)
        #expect(revs[0].body["_revisions"]?["start"]?.intValue == 2)
        #expect(revs[1].error == RevisionError(status: 404, error: "not_found", reason: "missing"))
        // Inline again for _bulk_docs: data back, follows gone, stubs untouched.
        let inline = revs[0].inlineJSON()
        #expect(inline["_attachments"]?["t.txt"]?["data"]?.stringValue == "aGVsbG8=")
        #expect(inline["_attachments"]?["t.txt"]?["follows"] == nil)
        #expect(inline["_attachments"]?["old.txt"]?["stub"]?.boolValue == true)
        // And the writer's answer parses back to the same revisions.
        #expect(try BulkGet.parseJSONAnswer(BulkGet.jsonAnswer(revs)) == revs)
    }

    // Proves Sync Gateway's multipart/mixed answer round-trips through writer and parser: a plain JSON
    // part, a multipart/related part with attachment bytes, an error part.
    @Test func bulkGetMultipartAnswer() throws {
        let plain = FetchedRevision(id: "p", rev: "1-p", body: try JSON.parse(#"{"_id":"p","_rev":"1-p","v":1}"#))
        var withAtt = FetchedRevision(
            id: "q", rev: "3-q",
            body: try JSON.parse(
                #"{"_id":"q","_rev":"3-q","_attachments":{"img.jpg":{"content_type":"image/jpeg","follows":true,"length":4}}}"#
            ))
        withAtt.attachments["img.jpg"] = [0xFF, 0xD8, 0x0D, 0x0A]
        let err = FetchedRevision(
            id: "r", rev: "1-r", error: RevisionError(status: 403, error: "forbidden", reason: "no"))
        let m = BulkGet.multipartAnswer([plain, withAtt, err])
        let parsed = try Multipart.parse(m.serialized(), contentType: m.contentType)
        #expect(parsed.parts[1].docID == "q" && parsed.parts[2].isError)
        let revs = try BulkGet.parseMultipartAnswer(parsed)
        #expect(revs == [plain, withAtt, err])
    }

    // Proves open_revs JSON answers parse ok and missing entries, and that a multipart/related document
    // matches attachment parts by filename even out of order.
    @Test func openRevsAndRelated() throws {
        let revs = try BulkGet.parseOpenRevsJSON(
            try JSON.parse(#"[{"ok":{"_id":"a","_rev":"1-a"}},{"missing":"2-q"}]"#), id: "a")
        #expect(revs.count == 2 && revs[1].rev == "2-q" && revs[1].error?.status == 404)

        let doc = #"{"_id":"d","_rev":"1-d","_attachments":{"x":{"follows":true},"y":{"follows":true}}}"#
        let related = Multipart(
            subtype: "related",
            parts: [
                MultipartPart(json: Array(doc.utf8)),
                MultipartPart(headers: [("Content-Disposition", "attachment; filename=\"y\"")], body: [2]),
                MultipartPart(headers: [("Content-Disposition", "attachment; filename=\"x\"")], body: [1]),
            ])
        let r = try BulkGet.revision(related: related)
        #expect(r.attachments == ["x": [1], "y": [2]])
        // An attachment said to follow but absent is an error, not silent data loss.
        let broken = Multipart(subtype: "related", parts: [MultipartPart(json: Array(doc.utf8))])
        #expect(throws: ReplicationError.self) { try BulkGet.revision(related: broken) }
    }

    // Proves base64 round-trips every length and rejects garbage.
    @Test func base64() {
        for n in 0..<20 {
            let bytes = (0..<n).map { UInt8(truncatingIfNeeded: $0 &* 37 &+ 250) }
            #expect(Base64.decode(Base64.encode(bytes)) == bytes)
        }
        #expect(Base64.encode(Array("hello".utf8)) == "aGVsbG8=")
        #expect(Base64.decode("a$b=") == nil)
    }

    // Proves error classification: network and 5xx retry, 4xx and unreadable answers do not.
    @Test func transientClassification() {
        #expect(ReplicationError.network("x").isTransient)
        #expect(ReplicationError.http(status: 503, error: "", reason: "").isTransient)
        #expect(ReplicationError.http(status: 429, error: "", reason: "").isTransient)
        #expect(!ReplicationError.http(status: 401, error: "", reason: "").isTransient)
        #expect(!ReplicationError.http(status: 404, error: "", reason: "").isTransient)
        #expect(!ReplicationError.badResponse("x").isTransient)
    }
}
