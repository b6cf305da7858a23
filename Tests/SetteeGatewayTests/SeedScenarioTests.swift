import Foundation
import SetteeDocument
import SetteeGateway
import SetteeJSON
import Testing

/// The sync function of seed 001 (Couchbase Mobile 1.4 tutorial), as its config file has it.
let seed001Sync = """
    function (doc, oldDoc){
      if (doc._deleted == undefined) { validateDocument(doc); } else { validateDocument(oldDoc); }
      var docOwner = (doc._deleted == undefined) ? doc.owner : oldDoc.owner;
      var publicChannel = "_public";
      var privateChannel = "_"+docOwner;
      access(docOwner,[publicChannel,privateChannel]);
      if (doc._deleted == undefined && oldDoc != null && oldDoc._deleted == undefined) {
        if (doc.tag != oldDoc.tag) { throw({forbidden: "Cannot change tag of document"}); }
      }
      var docTag = (doc._deleted == undefined) ? doc.tag : oldDoc.tag;
      if (doc._deleted == undefined) {
        if (docTag == "public") { channel(publicChannel); }
        else { requireUser(docOwner); channel(privateChannel); }
      } else {
        channel(doc.channels);
      }
      function validateDocument (doc) {
        if (!doc.tag ) { throw({forbidden: "Invalid document type: Tag not provided" + doc.tag}); }
        if (!doc.owner) { throw({forbidden: "Invalid document type: Owner not provided" + doc.owner}); }
      }
    }
    """

@Suite struct SeedScenarioTests {
    static func options() -> DatabaseOptions {
        DatabaseOptions(
            name: "demo", syncSource: seed001Sync,
            users: [
                "GUEST": json(#"{"disabled":true,"admin_channels":["*"]}"#),
                "joe": json(#"{"password":"password","disabled":false,"admin_channels":["_public","_joe"]}"#),
                "jane": json(#"{"password":"password","disabled":false,"admin_channels":["_public","_jane"]}"#),
            ])
    }

    @Test func seed001RulesHoldInProcess() async throws {
        // Proves: seed 001 through the database API with its exact sync function: jane's private document
        // reaches only jane, her public one reaches joe, a change of `tag` is 403, a document without
        // `owner` is 403, joe cannot write as jane, GUEST is disabled, and the admin's _all_docs shows both
        // documents with their channels.
        let f = try await Fixture.open(Self.options())
        #expect(await f.db.guestContext() == nil)
        let jane = try #require(await f.db.authenticate(name: "jane", password: "password"))
        let joe = try #require(await f.db.authenticate(name: "joe", password: "password"))
        #expect(await f.db.authenticate(name: "joe", password: "nope") == nil)

        let priv = try await f.db.put(
            "doc1", body: json(#"{"tag":"private","owner":"jane","name":"doc101"}"#), user: jane)
        _ = try await f.db.put("doc2", body: json(#"{"tag":"public","owner":"jane","name":"doc102"}"#), user: jane)

        let joeFeed = try await f.db.changes(ChangesQuery(), user: joe)
        #expect(ids(joeFeed).contains("doc2") && !ids(joeFeed).contains("doc1"))
        let janeFeed = try await f.db.changes(ChangesQuery(), user: jane)
        #expect(ids(janeFeed).contains("doc1") && ids(janeFeed).contains("doc2"))
        do {
            _ = try await f.db.get("doc1", user: joe)
            Issue.record("joe read jane's private doc")
        } catch { #expect(error.status == 403) }

        do {
            _ = try await f.db.put(
                "doc1", body: json(#"{"_rev":"\#(priv)","tag":"public","owner":"jane"}"#), user: jane)
            Issue.record("tag change accepted")
        } catch {
            #expect(error.status == 403 && error.reason == "Cannot change tag of document")
        }
        do {
            _ = try await f.db.put("doc3", body: json(#"{"tag":"private"}"#), user: jane)
            Issue.record("doc without owner accepted")
        } catch { #expect(error.status == 403) }
        do {
            _ = try await f.db.put("doc4", body: json(#"{"tag":"private","owner":"jane"}"#), user: joe)
            Issue.record("joe wrote as jane")
        } catch { #expect(error.status == 403) }

        let all = try await f.db.allDocs(AllDocsQuery(includeDocs: true, channels: true), user: nil)
        let rows = all["rows"]?.arrayValue ?? []
        #expect(rows.count == 2)
        #expect(rows.first?["value"]?["channels"]?.arrayValue == [.string("_jane")])
        #expect(rows.last?["value"]?["channels"]?.arrayValue == [.string("_public")])
        #expect(rows.first?["doc"]?["name"]?.stringValue == "doc101")
        await f.close()
    }

    @Test func accessGrantedByADocumentBackfillsAndIsRevokedWithIt() async throws {
        // Proves: a grant made by `access()` in a document gives the user that channel (with backfill of
        // older documents as compound sequences and a wake-up of their waiting feed), and deleting the
        // granting document revokes it.
        let sync = """
            function(doc, oldDoc) {
              if (doc.type == "grant") { access(doc.user, doc.channel); channel("grants"); }
              else { channel(doc.channels); }
            }
            """
        let f = try await Fixture.open(
            DatabaseOptions(
                name: "db", syncSource: sync, users: ["amy": json(#"{"password":"secret","admin_channels":[]}"#)]))
        for i in 0..<3 { _ = try await f.db.put("old\(i)", body: json(#"{"channels":["vault"]}"#), user: nil) }
        let amy = try #require(f.db.userContext("amy"))
        let before = try await f.db.changes(ChangesQuery(), user: amy)
        #expect(ids(before) == ["_user/amy"])
        let waiter = Task { await f.db.waitForChange(after: before.lastSeq, user: amy, deadline: .now + .seconds(20)) }
        try await Task.sleep(for: .milliseconds(100))
        let grant = try await f.db.put("g", body: json(#"{"type":"grant","user":"amy","channel":"vault"}"#), user: nil)
        #expect(await waiter.value)
        let after = try await f.db.changes(ChangesQuery(since: before.lastSeq), user: amy)
        #expect(Set(ids(after)) == ["old0", "old1", "old2"])
        #expect(after.rows.allSatisfy { $0.seq.triggeredBy != 0 })
        #expect(try await f.db.get("old0", user: amy).body["_id"]?.stringValue == "old0")
        _ = try await f.db.delete("g", rev: grant, user: nil)
        do {
            _ = try await f.db.get("old0", user: amy)
            Issue.record("revoked channel still readable")
        } catch { #expect(error.status == 403) }
        await f.close()
    }
}
