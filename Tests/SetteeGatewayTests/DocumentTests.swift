import Foundation
import SetteeCore
import SetteeDocument
import SetteeGateway
import SetteeJSON
import SetteeSync
import Testing

@Suite struct DocumentTests {
    @Test func revisionTreeSurvivesTheBucketAndASecondDatabase() async throws {
        // Proves: a document's revision tree (edits, a tombstone, re-creation) is stored in the bucket's
        // `_sync` and a second database opened on the same bucket reads the same winner and history.
        let f = try await Fixture.open()
        let r1 = try await f.db.put("doc", body: json(#"{"a":1}"#), user: nil)
        let r2 = try await f.db.put("doc", body: json(#"{"_rev":"\#(r1)","a":2}"#), user: nil)
        let r3 = try await f.db.delete("doc", rev: r2, user: nil)
        let r4 = try await f.db.put("doc", body: json(#"{"a":4}"#), user: nil)
        #expect(r1.generation == 1 && r2.generation == 2 && r3.generation == 3 && r4.generation == 4)

        let raw = try await f.db.raw("doc")
        #expect(raw["a"]?.intValue == 4)
        #expect(raw["_sync"]?["rev"]?.stringValue == r4.description)
        let tree = try RevTree(json: raw["_sync"]!["history"]!)
        #expect(tree.count == 4 && tree.winner == r4 && tree.isDeleted(r3))

        let other = try await GatewayDatabase(
            options: DatabaseOptions(name: "db"), bucket: f.bucket, logger: quietLogger())
        let (body, _) = try await other.get("doc", revs: true, user: nil)
        #expect(body["_rev"]?.stringValue == r4.description)
        #expect(body["_revisions"]?["start"]?.intValue == 4)
        #expect(body["_revisions"]?["ids"]?.arrayValue?.count == 4)
        // The tombstone's body is still there for replicators.
        let (tomb, _) = try await other.get("doc", rev: r3, user: nil)
        #expect(tomb["_deleted"]?.boolValue == true)
        await other.close()
        await f.close()
    }

    @Test func editRulesAnswerConflicts() async throws {
        // Proves: the CouchDB edit rules: create without rev on a live doc is 409, a stale parent is 409,
        // an unparsable rev is 400, and a body with an unknown `_` member is 400.
        let f = try await Fixture.open()
        let r1 = try await f.db.put("d", body: json(#"{"v":1}"#), user: nil)
        await #expect(throws: GatewayError.self) { try await f.db.put("d", body: json(#"{"v":2}"#), user: nil) }
        _ = try await f.db.put("d", body: json(#"{"_rev":"\#(r1)","v":2}"#), user: nil)
        do {
            _ = try await f.db.put("d", body: json(#"{"_rev":"\#(r1)","v":3}"#), user: nil)
            Issue.record("stale parent accepted")
        } catch { #expect(error.status == 409) }
        do {
            _ = try await f.db.put("d", body: json(#"{"_rev":"bogus","v":3}"#), user: nil)
            Issue.record("bad rev accepted")
        } catch { #expect(error.status == 400) }
        do {
            _ = try await f.db.put("e", body: json(#"{"_foo":1}"#), user: nil)
            Issue.record("underscore member accepted")
        } catch { #expect(error.status == 400) }
        do {
            _ = try await f.db.get("nope", user: nil)
            Issue.record("missing doc found")
        } catch { #expect(error.status == 404) }
        await f.close()
    }

    @Test func replicatedConflictsPickTheWinnerAndDeletingItPromotesTheOther() async throws {
        // Proves: new_edits=false grafts `_revisions` histories into branches, the winner is the higher
        // (generation, digest) leaf, open_revs lists both leaves, and deleting the winner promotes the other.
        let f = try await Fixture.open()
        let a = json(#"{"_id":"c","_rev":"2-aaa","_revisions":{"start":2,"ids":["aaa","root"]},"side":"a"}"#)
        let b = json(#"{"_id":"c","_rev":"2-bbb","_revisions":{"start":2,"ids":["bbb","root"]},"side":"b"}"#)
        let rows = await f.db.bulkDocs([a, b], newEdits: false, user: nil)
        #expect(rows.allSatisfy { $0["ok"]?.boolValue == true })
        // Already known: a no-op.
        #expect(try await f.db.put("c", body: a, newEdits: false, user: nil).description == "2-aaa")
        let (body, _) = try await f.db.get("c", user: nil)
        #expect(body["side"]?.stringValue == "b")
        let open = try await f.db.openRevs("c", revs: nil, revs: true, user: nil)
        #expect(open.count == 2)
        let page = try await f.db.changes(ChangesQuery(styleAllDocs: true), user: nil)
        #expect(page.rows.count == 1 && page.rows[0].changes.count == 2)
        _ = try await f.db.delete("c", rev: RevID("2-bbb"), user: nil)
        let (after, _) = try await f.db.get("c", user: nil)
        #expect(after["side"]?.stringValue == "a")
        let diff = await f.db.revsDiff(["c": [RevID("2-aaa")!, RevID("3-zzz")!], "new": [RevID("1-x")!]], user: nil)
        #expect(diff["c"]?["missing"]?.arrayValue?.count == 1)
        #expect(diff["new"]?["missing"]?.arrayValue?.count == 1)
        await f.close()
    }

    /// Proves `style=all_docs` lists a tombstoned branch's leaf, and with `active_only=true` leaves it out while
    /// listing the live leaves (Sync Gateway's changes feed: a deleted leaf is not listed under `active_only`), so a
    /// pull into an empty database is not sent the deleted branches of the documents it pulls (issue 71).
    @Test func activeOnlyAllDocsRowsLeaveDeletedBranchesOut() async throws {
        let f = try await Fixture.open()
        let a = json(#"{"_id":"c","_rev":"2-aaa","_revisions":{"start":2,"ids":["aaa","root"]},"side":"a"}"#)
        let b = json(#"{"_id":"c","_rev":"2-bbb","_revisions":{"start":2,"ids":["bbb","root"]},"side":"b"}"#)
        let d = json(#"{"_id":"c","_rev":"2-ddd","_revisions":{"start":2,"ids":["ddd","root"]},"side":"d"}"#)
        #expect(await f.db.bulkDocs([a, b, d], newEdits: false, user: nil).allSatisfy { $0["ok"]?.boolValue == true })
        // The application resolves one conflict by deleting the losing leaf 2-aaa.
        _ = try await f.db.delete("c", rev: RevID("2-aaa"), user: nil)
        let all = try await f.db.changes(ChangesQuery(styleAllDocs: true), user: nil)
        #expect(all.rows.count == 1 && all.rows[0].changes.count == 3)
        let active = try await f.db.changes(ChangesQuery(styleAllDocs: true, activeOnly: true), user: nil)
        #expect(active.rows.count == 1)
        #expect(Set(active.rows[0].changes.map(\.description)) == ["2-bbb", "2-ddd"])
        // Without style=all_docs only the winner either way.
        let winner = try await f.db.changes(ChangesQuery(activeOnly: true), user: nil)
        #expect(winner.rows.map { $0.changes.map(\.description) } == [["2-ddd"]])
        await f.close()
    }

    @Test func attachmentsAreStoredOnceAndStubsCarryOver() async throws {
        // Proves: inline attachment data becomes a stub with digest/revpos, the bytes are stored under
        // `_sync:att:<digest>`, a later revision sending a stub keeps it, attachments=true returns the
        // bytes, and atts_since leaves attachments the client already has as stubs.
        let f = try await Fixture.open()
        let data = Array("hello attachment".utf8)
        let b64 = Data(data).base64EncodedString()
        let r1 = try await f.db.put(
            "a", body: json(#"{"_attachments":{"t.txt":{"content_type":"text/plain","data":"\#(b64)"}}}"#), user: nil)
        let (b1, _) = try await f.db.get("a", user: nil)
        let stub = b1["_attachments"]?["t.txt"]
        #expect(stub?["stub"]?.boolValue == true && stub?["revpos"]?.intValue == 1 && stub?["length"]?.intValue == 16)
        let digest = stub?["digest"]?.stringValue ?? ""
        #expect(try await f.bucket.get("_sync:att:" + digest)?.value == data)

        let r2 = try await f.db.put(
            "a", body: json(#"{"_rev":"\#(r1)","x":1,"_attachments":{"t.txt":{"stub":true,"revpos":1}}}"#), user: nil)
        let (b2, atts) = try await f.db.get("a", attachmentBodies: true, user: nil)
        #expect(b2["_attachments"]?["t.txt"]?["data"]?.stringValue == b64)
        #expect(atts["t.txt"] == data)
        let (b3, atts3) = try await f.db.get("a", rev: r2, attsSince: [r1], attachmentBodies: true, user: nil)
        #expect(b3["_attachments"]?["t.txt"]?["stub"]?.boolValue == true && atts3.isEmpty)
        let (info, bytes) = try await f.db.attachment(docID: "a", name: "t.txt", rev: nil, user: nil)
        #expect(info.contentType == "text/plain" && bytes == data)
        await f.close()
    }

    @Test func aStubMustNameDataItsOwnDocumentHolds() async throws {
        // Proves a stub attachment is accepted only for data the document already holds: the parent's attachment by
        // name, or any kept revision's by digest (kept under a new name). A stub naming the digest of another
        // document's attachment is refused 412 missing_stub, by a new edit and by a replicated revision
        // (new_edits=false) alike, and nothing of it becomes readable. Before, such a stub was stored as given and
        // `GET /db/doc/name` served the other document's bytes, whatever that document's channels.
        let f = try await Fixture.open()
        let data = Array("secret attachment".utf8)
        _ = try await f.db.put(
            "secret",
            body: json(#"{"_attachments":{"s.txt":{"data":"\#(Data(data).base64EncodedString())"}}}"#), user: nil)
        let digest = try #require(
            try await f.db.get("secret", user: nil).0["_attachments"]?["s.txt"]?["digest"]?.stringValue)

        let theft = json(#"{"_attachments":{"s.txt":{"stub":true,"digest":"\#(digest)","revpos":1}}}"#)
        await #expect(throws: GatewayError.self) { _ = try await f.db.put("mine", body: theft, user: nil) }
        do {
            _ = try await f.db.put("mine", body: theft, user: nil)
        } catch {
            #expect(error.status == 412 && error.error == "missing_stub")
        }
        let replicated = json(
            #"{"_rev":"2-bb","_revisions":{"start":2,"ids":["bb","aa"]},"_attachments":{"s.txt":{"stub":true,"digest":"\#(digest)","revpos":1}}}"#
        )
        await #expect(throws: GatewayError.self) {
            _ = try await f.db.put("mine2", body: replicated, newEdits: false, user: nil)
        }
        await #expect(throws: GatewayError.self) {
            _ = try await f.db.attachment(docID: "mine", name: "s.txt", rev: nil, user: nil)
        }

        // The document's own data: by name from the parent, and by digest under another name.
        let r1 = try await f.db.put(
            "own", body: json(#"{"_attachments":{"a.txt":{"data":"\#(Data(data).base64EncodedString())"}}}"#),
            user: nil)
        let r2 = try await f.db.put(
            "own",
            body: json(
                #"{"_rev":"\#(r1)","_attachments":{"a.txt":{"stub":true},"b.txt":{"stub":true,"digest":"\#(digest)"}}}"#
            ), user: nil)
        #expect(r2.generation == 2)
        let (_, bytes) = try await f.db.attachment(docID: "own", name: "b.txt", rev: nil, user: nil)
        #expect(bytes == data)
        await f.close()
    }

    @Test func theDefaultSyncFunctionChecksChannelsAsTheJavaScriptOneDoes() async throws {
        // Proves the default sync function (no `sync` configured, run in Swift) refuses what `channel()` refuses: an
        // invalid name (empty, over 240 bytes, with a comma) and more than `Limits.maxChannelsPerGrant` channels,
        // with 400 and nothing stored; a valid list at the bound is stored. Before, only a comma was checked.
        let f = try await Fixture.open()
        let long = String(repeating: "x", count: Limits.maxChannelNameLength + 1)
        for bad in [#"["ok",""]"#, #"["\#(long)"]"#, #"["a,b"]"#] {
            await #expect(throws: GatewayError.self) {
                _ = try await f.db.put("bad", body: json(#"{"channels":\#(bad)}"#), user: nil)
            }
        }
        let names = (0...Limits.maxChannelsPerGrant).map { #""c\#($0)""# }
        await #expect(throws: GatewayError.self) {
            _ = try await f.db.put("many", body: json(#"{"channels":[\#(names.joined(separator: ","))]}"#), user: nil)
        }
        _ = try await f.db.put("fine", body: json(#"{"channels":["a","b"]}"#), user: nil)
        await #expect(throws: GatewayError.self) { _ = try await f.db.get("bad", user: nil) }
        await f.close()
    }

    @Test func localDocumentsUseZeroRevisions() async throws {
        // Proves: `_local` docs get "0-N" revisions, a stale or missing `_rev` is 409, and they never
        // appear in `_changes` or `_all_docs`.
        let f = try await Fixture.open()
        let r1 = try await f.db.putLocal("_local/cp", json(#"{"seq":1}"#))
        #expect(r1 == "0-1")
        let r2 = try await f.db.putLocal("cp", json(#"{"_rev":"0-1","seq":2}"#))
        #expect(r2 == "0-2")
        do {
            _ = try await f.db.putLocal("cp", json(#"{"_rev":"0-1","seq":3}"#))
            Issue.record("stale local rev accepted")
        } catch { #expect(error.status == 409) }
        let got = try await f.db.local("cp")
        #expect(
            got["_id"]?.stringValue == "_local/cp" && got["_rev"]?.stringValue == "0-2" && got["seq"]?.intValue == 2)
        let page = try await f.db.changes(ChangesQuery(), user: nil)
        #expect(page.rows.isEmpty)
        try await f.db.deleteLocal("cp", rev: "0-2")
        await #expect(throws: GatewayError.self) { try await f.db.local("cp") }
        await f.close()
    }

    @Test func allDocsListsLiveDocumentsWithChannelsAndAccess() async throws {
        // Proves: `_all_docs` lists live documents in id order with ranges, limits and include_docs, the
        // admin sees channels, and a user sees only documents in their channels.
        let f = try await Fixture.open()
        for (id, ch) in [("b", "red"), ("a", "blue"), ("c", "red")] {
            _ = try await f.db.put(id, body: json(#"{"channels":["\#(ch)"],"n":"\#(id)"}"#), user: nil)
        }
        let gone = try await f.db.put("d", body: json(#"{"channels":["red"]}"#), user: nil)
        _ = try await f.db.delete("d", rev: gone, user: nil)
        let all = try await f.db.allDocs(AllDocsQuery(includeDocs: true, channels: true), user: nil)
        let ids = all["rows"]?.arrayValue?.compactMap { $0["id"]?.stringValue }
        #expect(ids == ["a", "b", "c"])
        #expect(all["rows"]?.arrayValue?.first?["doc"]?["n"]?.stringValue == "a")
        #expect(all["rows"]?.arrayValue?.first?["value"]?["channels"]?.arrayValue?.count == 1)
        let ranged = try await f.db.allDocs(AllDocsQuery(startKey: "b", limit: 1), user: nil)
        #expect(ranged["rows"]?.arrayValue?.compactMap { $0["id"]?.stringValue } == ["b"])
        let user = UserContext(name: "someone", channels: ["red"])
        let mine = try await f.db.allDocs(AllDocsQuery(), user: user)
        #expect(mine["rows"]?.arrayValue?.compactMap { $0["id"]?.stringValue } == ["b", "c"])
        await f.close()
    }
}

/// `_bulk_docs` batches naming one id more than once.
@Suite struct RepeatedIDBulkDocsTests {
    /// Proves a batch naming one document twice (a replicator pushes each conflicting leaf as a row of its own) still
    /// writes its other documents concurrently (more than one bucket call at once, each taking 20 ms, as on a cluster),
    /// while the rows of the repeated id are written in order: both leaves are kept and every row is ok, in the
    /// request's order. Before, the repeated id made the whole batch run one row at a time.
    @Test func aRepeatedIDKeepsTheRestOfTheBatchConcurrent() async throws {
        let inner = try EmbeddedBucket(server: "walrus:", name: "test", logger: quietLogger())
        let slow = SlowCalls(delay: .milliseconds(20))
        let db = try await GatewayDatabase(
            options: DatabaseOptions(name: "db"),
            bucket: StalledFeedBucket(inner: inner, gate: FeedGate(), slowCalls: slow),
            logger: quietLogger())
        var batch = (0..<16).map { json(#"{"_id":"d\#($0)","_rev":"1-a","v":\#($0)}"#) }
        batch.insert(json(#"{"_id":"d0","_rev":"1-b","v":100}"#), at: 8)
        batch.append(json(#"{"_id":"d0","_rev":"2-c","_revisions":{"start":2,"ids":["c","b"]},"v":200}"#))
        slow.reset()
        let rows = await db.bulkDocs(batch, newEdits: false, user: nil)
        #expect(rows.count == batch.count)
        for (row, doc) in zip(rows, batch) {
            #expect(row["ok"]?.boolValue == true && row["id"] == doc["_id"] && row["rev"] == doc["_rev"], "\(row)")
        }
        #expect(slow.most > 1, "the batch ran one bucket call at a time")
        // open_revs=all reads the document once for all its leaves (it read it again for each).
        slow.reset()
        let leaves = try await db.openRevs("d0", revs: nil, revs: false, user: nil)
        #expect(leaves.count == 2)
        #expect(slow.total == 1, "open_revs made \(slow.total) reads")
        #expect(try await db.get("d0", user: nil).body["v"]?.intValue == 200)
        await db.close()
        await inner.close()
    }
}

/// The attachment bytes one revision read with its attachments inline may hold.
@Suite struct InlineAttachmentBoundTests {
    /// Proves a read with attachments inline (`?attachments=true`, also `_bulk_get`'s and `open_revs`' reads) answers
    /// 413 `too_large` once the revision's attachments pass `maxInlineAttachmentBytes` (1,000 here: three of 400
    /// bytes), while the same document reads with stubs, one within the bound reads with its data, and an
    /// `atts_since` that covers the attachments reads it with stubs. Before, such a read held every attachment.
    @Test func inlineAttachmentsAreBounded() async throws {
        var options = DatabaseOptions(name: "db")
        options.maxInlineAttachmentBytes = 1000
        let f = try await Fixture.open(options)
        let data = Data(repeating: 7, count: 400).base64EncodedString()
        func attachments(_ n: Int) -> String {
            (0..<n).map { #""a\#($0)":{"content_type":"application/octet-stream","data":"\#(data)"}"# }
                .joined(separator: ",")
        }
        let big = try await f.db.put("big", body: json(#"{"_attachments":{\#(attachments(3))}}"#), user: nil)
        _ = try await f.db.put("small", body: json(#"{"_attachments":{\#(attachments(2))}}"#), user: nil)
        let error = await #expect(throws: GatewayError.self) {
            _ = try await f.db.get("big", attachmentBodies: true, user: nil)
        }
        #expect(error?.status == 413 && error?.error == "too_large", "\(String(describing: error))")
        let stubs = try await f.db.get("big", user: nil).body
        #expect(stubs["_attachments"]?.objectValue?.count == 3)
        let (small, bytes) = try await f.db.get("small", attachmentBodies: true, user: nil)
        #expect(bytes.count == 2 && bytes.values.allSatisfy { $0.count == 400 })
        #expect(small["_attachments"]?["a0"]?["data"]?.stringValue == data)
        let known = try await f.db.get("big", attsSince: [big], attachmentBodies: true, user: nil)
        #expect(known.attachments.isEmpty)
        await f.close()
    }

    /// Proves one request's inline attachments share the bound (1,000 bytes here): `open_revs` of two leaves with 600
    /// bytes each answers 413 where each leaf alone reads with its data, and two reads sharing one budget, as a
    /// `_bulk_get`'s overlapping reads do, refuse the second and leave the budget exceeded (the handler then refuses
    /// the whole answer). Before, each revision was bounded alone: a request held its leaf count, or its read width,
    /// times the bound.
    @Test func oneRequestsAttachmentsShareTheBound() async throws {
        var options = DatabaseOptions(name: "db")
        options.maxInlineAttachmentBytes = 1000
        let f = try await Fixture.open(options)
        func leaf(_ rev: String, _ fill: UInt8) -> JSON {
            let data = Data(repeating: fill, count: 600).base64EncodedString()
            return json(
                #"{"_rev":"\#(rev)","_attachments":{"a":{"content_type":"application/octet-stream","data":"\#(data)"}}}"#
            )
        }
        for (id, rev, fill) in [("doc", "1-aa", 1), ("doc", "1-bb", 2), ("other", "1-cc", 3)]
            as [(String, String, UInt8)]
        {
            _ = try await f.db.put(id, body: leaf(rev, fill), newEdits: false, user: nil)
        }
        let leaves = ["1-aa", "1-bb"].compactMap { RevID($0) }
        #expect(leaves.count == 2)
        for rev in leaves {
            let (_, bytes) = try await f.db.get("doc", rev: rev, attachmentBodies: true, user: nil)
            #expect(bytes["a"]?.count == 600, "\(rev)")
        }
        let error = await #expect(throws: GatewayError.self) {
            _ = try await f.db.openRevs("doc", revs: nil, revs: false, user: nil, attachmentBodies: true)
        }
        #expect(error?.status == 413 && error?.error == "too_large", "\(String(describing: error))")
        #expect(try await f.db.openRevs("doc", revs: nil, revs: false, user: nil).count == 2)
        let shared = f.db.inlineAttachmentBudget()
        let first = try await f.db.get("other", attachmentBodies: true, user: nil, attachmentBudget: shared)
        #expect(first.attachments["a"]?.count == 600 && !shared.isExceeded)
        let second = await #expect(throws: GatewayError.self) {
            _ = try await f.db.get("doc", attachmentBodies: true, user: nil, attachmentBudget: shared)
        }
        #expect(second?.status == 413 && shared.isExceeded, "\(String(describing: second))")
        await f.close()
    }
}
