import Foundation
import SetteeDocument
import SetteeGateway
import SetteeJSON
import SetteeSync
import Testing

@Suite struct AdminTests {
    @Test func principalsAndSessions() async throws {
        // Proves: admin principal documents (explicit and computed channels and roles, GUEST, name and
        // password rules, 201-vs-200 semantics), sessions that resolve to their user until deleted, and a
        // disabled user who can neither log in nor use a session.
        let f = try await Fixture.open(
            DatabaseOptions(name: "db", users: ["GUEST": json(#"{"disabled":false,"admin_channels":["pub"]}"#)]))
        #expect(try await f.db.putPrincipal("editors", isRole: true, json(#"{"admin_channels":["drafts"]}"#)))
        #expect(
            try await f.db.putPrincipal(
                "ann", isRole: false, json(#"{"password":"letmein","admin_channels":["a"],"admin_roles":["editors"]}"#))
        )
        #expect(
            !(try await f.db.putPrincipal(
                "ann", isRole: false, json(#"{"admin_channels":["a","b"],"admin_roles":["editors"]}"#))))
        // A verified password is remembered only until the password changes.
        #expect(await f.db.authenticate(name: "ann", password: "letmein")?.name == "ann")
        #expect(await f.db.authenticate(name: "ann", password: "letmein")?.name == "ann")
        _ = try await f.db.putPrincipal(
            "ann", isRole: false,
            json(#"{"password":"newpass","admin_channels":["a","b"],"admin_roles":["editors"]}"#))
        #expect(await f.db.authenticate(name: "ann", password: "letmein") == nil)
        #expect(await f.db.authenticate(name: "ann", password: "newpass")?.name == "ann")
        let ann = try await f.db.principal("ann", isRole: false)
        #expect(ann["admin_channels"]?.arrayValue == [.string("a"), .string("b")])
        #expect(ann["all_channels"]?.arrayValue == ["!", "a", "b", "drafts"].map { JSON.string($0) })
        #expect(ann["roles"]?.arrayValue == [.string("editors")] && ann["password"] == nil)
        #expect(try await f.db.principal("GUEST", isRole: false)["name"]?.stringValue == "GUEST")
        #expect(await f.db.guestContext()?.channels.contains("pub") == true)
        #expect(await f.db.principalNames(isRole: false) == ["ann"])
        for bad in [#"{"name":"other"}"#, #"{"password":"x"}"#, #"{"email":"not an email"}"#] {
            do {
                _ = try await f.db.putPrincipal("ann", isRole: false, json(bad))
                Issue.record("accepted \(bad)")
            } catch { #expect(error.status == 400) }
        }
        do {
            _ = try await f.db.putPrincipal("nopass", isRole: false, json(#"{"admin_channels":[]}"#))
            Issue.record("user without password accepted")
        } catch { #expect(error.status == 400) }

        let (sid, expires) = try await f.db.createSession(user: "ann", ttlSeconds: 60)
        #expect(expires > Date().timeIntervalSince1970)
        #expect(await f.db.session(sid)?.name == "ann")
        await f.db.deleteSession(sid)
        #expect(await f.db.session(sid) == nil)
        do {
            _ = try await f.db.createSession(user: "nobody", ttlSeconds: 60)
            Issue.record("session for a missing user")
        } catch { #expect(error.status == 404) }

        let (sid2, _) = try await f.db.createSession(user: "ann", ttlSeconds: 60)
        _ = try await f.db.putPrincipal("ann", isRole: false, json(#"{"disabled":true}"#))
        #expect(await f.db.session(sid2) == nil)
        #expect(await f.db.authenticate(name: "ann", password: "newpass") == nil)
        try await f.db.deletePrincipal("ann", isRole: false)
        await #expect(throws: GatewayError.self) { try await f.db.principal("ann", isRole: false) }
        await f.close()
    }

    @Test func feedFiltersPurgeAndCompact() async throws {
        // Proves: `_doc_ids` and include_docs on `_changes`, `_purge` removing a document with its history
        // (a later create starts again at generation 1), and `_compact` deleting an attachment no revision
        // refers to any more.
        let f = try await Fixture.open()
        let b64 = Data("bytes".utf8).base64EncodedString()
        let r1 = try await f.db.put("a", body: json(#"{"_attachments":{"f":{"data":"\#(b64)"}}}"#), user: nil)
        _ = try await f.db.put("b", body: json(#"{"v":"b"}"#), user: nil)
        let only = try await f.db.changes(ChangesQuery(includeDocs: true, docIDs: ["b"]), user: nil)
        #expect(only.rows.map(\.id) == ["b"] && only.rows[0].doc?["v"]?.stringValue == "b")

        let purged = try await f.db.purge(["b": ["*"], "missing": ["*"]])
        #expect(purged["purged"]?["b"] != nil && purged["purged"]?["missing"] == nil)
        await #expect(throws: GatewayError.self) { try await f.db.get("b", user: nil) }
        #expect(try await f.db.put("b", body: json(#"{"v":2}"#), user: nil).generation == 1)

        // Drop the attachment: its blob is unreferenced once the old revision's body is gone.
        _ = try await f.db.put("a", body: json(#"{"_rev":"\#(r1)"}"#), user: nil)
        let digest = AttachmentInfo.digest(of: Array("bytes".utf8))
        #expect(try await f.bucket.get("_sync:att:" + digest) != nil)
        // The blob is still referenced by revision 1's kept body; purge "a" and compact.
        _ = try await f.db.purge(["a": ["*"]])
        let seen = await eventually { (await f.db.compact() ?? 0) >= 1 }
        #expect(seen)
        #expect(try await f.bucket.get("_sync:att:" + digest) == nil)
        await f.close()
    }
}
