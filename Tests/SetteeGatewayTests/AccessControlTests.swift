import Foundation
import SetteeCore
import SetteeDocument
import SetteeGateway
import SetteeJSON
import Testing

@Suite struct AccessControlTests {
    /// The model the database is checked against: documents' channels, users' and roles' grants.
    struct Model {
        var docs: [String: Set<String>] = [:]
        var deleted: Set<String> = []
        var userChannels: [String: Set<String>] = [:]
        var userRoles: [String: Set<String>] = [:]
        var roleChannels: [String: Set<String>] = [:]

        func visible(_ user: String) -> Set<String> {
            var out = userChannels[user] ?? []
            for r in userRoles[user] ?? [] { out.formUnion(roleChannels[r] ?? []) }
            out.insert("!")
            return out
        }

        func canSee(_ user: String, _ doc: String) -> Bool {
            guard let ch = docs[doc], !deleted.contains(doc) else { return false }
            let v = visible(user)
            return v.contains("*") || !ch.isDisjoint(with: v)
        }
    }

    @Test func noReadPathReturnsADocumentTheUserCannotSee() async throws {
        // Proves: under random channel assignments, admin grants and revocations, role assignments and role
        // changes, GET, open_revs, _all_docs, _changes (with include_docs, and with a checkpoint taken
        // before the changes) and attachments never give a user a body of a document outside their channels.
        let seed = UInt64.random(in: 1...UInt64.max)
        print("access-control seed \(seed)")
        var rng = SplitMix64(seed: seed)
        let f = try await Fixture.open()
        let channels = ["a", "b", "c", "d", "!"]
        let users = ["u0", "u1", "u2", "u3"]
        let roles = ["r0", "r1"]
        var model = Model()
        var revs: [String: String] = [:]
        var checkpoints: [String: ChangesSince] = [:]
        let secret = Data("secret".utf8).base64EncodedString()

        func pick(_ from: [String], max: Int) -> [String] {
            Array(from.shuffled(using: &rng).prefix(Int.random(in: 0...max, using: &rng)))
        }
        func jsonList(_ items: [String]) -> String { "[" + items.map { "\"\($0)\"" }.joined(separator: ",") + "]" }

        for r in roles {
            let ch = pick(channels, max: 2)
            model.roleChannels[r] = Set(ch)
            _ = try await f.db.putPrincipal(r, isRole: true, json(#"{"admin_channels":\#(jsonList(ch))}"#))
        }
        for u in users {
            _ = try await f.db.putPrincipal(u, isRole: false, json(#"{"password":"pass","admin_channels":[]}"#))
            model.userChannels[u] = []
        }

        // The model follows the database's winner (conflict branches can take over).
        func refresh(_ id: String) async {
            if let b = try? await f.db.get(id, user: nil).body {
                model.docs[id] = Set(b["channels"]?.arrayValue?.compactMap(\.stringValue) ?? [])
                model.deleted.remove(id)
                revs[id] = b["_rev"]?.stringValue
            } else {
                model.deleted.insert(id)
                revs[id] = nil
            }
        }

        for step in 0..<120 {
            switch Int.random(in: 0..<11, using: &rng) {
            case 0..<5:
                let id = "d\(Int.random(in: 0..<15, using: &rng))"
                let ch = pick(channels, max: 2)
                var body =
                    #"{"channels":\#(jsonList(ch)),"secret":"s-\#(id)","_attachments":{"f":{"data":"\#(secret)"}}"#
                if let r = revs[id] { body += #","_rev":"\#(r)""# }
                body += "}"
                _ = try await f.db.put(id, body: json(body), user: nil)
                model.docs[id] = Set(ch)
                await refresh(id)
            case 5:
                guard let id = revs.keys.sorted().randomElement(using: &rng), let r = revs[id] else { break }
                _ = try await f.db.delete(id, rev: RevID(r), user: nil)
                await refresh(id)
            case 6..<8:
                let u = users.randomElement(using: &rng)!
                let ch = pick(channels, max: 3)
                let rs = pick(roles, max: 1)
                model.userChannels[u] = Set(ch)
                model.userRoles[u] = Set(rs)
                _ = try await f.db.putPrincipal(
                    u, isRole: false, json(#"{"admin_channels":\#(jsonList(ch)),"admin_roles":\#(jsonList(rs))}"#))
            case 8:
                // A replicated conflict: a new branch with its own channels.
                guard let id = model.docs.keys.sorted().randomElement(using: &rng) else { break }
                let ch = pick(channels, max: 2)
                let body = #"{"_rev":"1-c\#(step)","channels":\#(jsonList(ch)),"secret":"s-\#(id)"}"#
                _ = try await f.db.put(id, body: json(body), newEdits: false, user: nil)
                await refresh(id)
            default:
                let r = roles.randomElement(using: &rng)!
                let ch = pick(channels, max: 2)
                model.roleChannels[r] = Set(ch)
                _ = try await f.db.putPrincipal(r, isRole: true, json(#"{"admin_channels":\#(jsonList(ch))}"#))
            }
            guard step % 10 == 9 else { continue }
            for u in users {
                let ctx = try #require(f.db.userContext(u))
                for id in model.docs.keys.sorted() {
                    let sees = model.canSee(u, id)
                    let got = try? await f.db.get(id, user: ctx).body
                    #expect((got?["secret"] != nil) == sees, "seed \(seed) user \(u) doc \(id) GET")
                    let open = (try? await f.db.openRevs(id, revs: nil, revs: false, user: ctx)) ?? []
                    for case .ok(let b) in open where b["secret"] != nil {
                        let revChannels = Set(b["channels"]?.arrayValue?.compactMap(\.stringValue) ?? [])
                        #expect(
                            !revChannels.isDisjoint(with: model.visible(u)),
                            "seed \(seed) user \(u) doc \(id) open_revs")
                    }
                    // Every leaf by explicit rev: a body only for a revision in one of the user's channels.
                    let leaves = (try? await f.db.openRevs(id, revs: nil, revs: false, user: nil)) ?? []
                    for case .ok(let leaf) in leaves {
                        guard let rev = leaf["_rev"]?.stringValue.flatMap(RevID.init) else { continue }
                        let revChannels = Set(leaf["channels"]?.arrayValue?.compactMap(\.stringValue) ?? [])
                        let body = try? await f.db.get(id, rev: rev, user: ctx).body
                        if body?["secret"] != nil {
                            #expect(
                                !revChannels.isDisjoint(with: model.visible(u)),
                                "seed \(seed) user \(u) doc \(id) rev \(rev)")
                        }
                    }
                    let att = try? await f.db.attachment(docID: id, name: "f", rev: nil, user: ctx)
                    if att != nil { #expect(sees, "seed \(seed) user \(u) doc \(id) attachment") }
                }
                let all = try await f.db.allDocs(AllDocsQuery(includeDocs: true), user: ctx)
                let listed = Set(all["rows"]?.arrayValue?.compactMap { $0["id"]?.stringValue } ?? [])
                let expected = Set(model.docs.keys.filter { model.canSee(u, $0) })
                #expect(listed == expected, "seed \(seed) user \(u) _all_docs")
                for since in [ChangesSince.zero, checkpoints[u] ?? .zero] {
                    let page = try await f.db.changes(ChangesQuery(since: since, includeDocs: true), user: ctx)
                    for row in page.rows where !row.id.hasPrefix("_user/") {
                        if row.doc?["secret"] != nil {
                            #expect(model.canSee(u, row.id), "seed \(seed) user \(u) doc \(row.id) _changes")
                        }
                        if row.removed.isEmpty && !row.deleted {
                            #expect(model.canSee(u, row.id), "seed \(seed) user \(u) doc \(row.id) _changes row")
                        }
                    }
                    if since == .zero {
                        // A full feed lists every document the user can see.
                        let listedLive = Set(page.rows.filter { $0.removed.isEmpty && !$0.deleted }.map(\.id))
                        #expect(listedLive.isSuperset(of: expected), "seed \(seed) user \(u) full _changes")
                        checkpoints[u] = page.lastSeq
                    }
                }
            }
        }
        await f.close()
    }
}
