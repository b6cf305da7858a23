import SetteeCore
import SetteeJSON
import SetteeSync
import Testing

private func json(_ text: String) -> JSON { try! JSON.parse(text) }

@Suite struct PrincipalTests {
    // Proves bcrypt via libxcrypt: a `$2b$10$` hash that checks the right password only, and that
    // hashes of the same password differ (salted); Sync Gateway's `$2a$` hashes verify too.
    @Test func bcryptHashAndCheck() {
        let h = PasswordHash.hash("password") ?? ""
        #expect(h.hasPrefix("$2b$10$"))
        #expect(h.utf8.count == 60)
        #expect(PasswordHash.check("password", against: h))
        #expect(!PasswordHash.check("passwore", against: h))
        #expect(PasswordHash.hash("password") != h)
        // A known vector (OpenBSD's bcrypt, $2a$, cost 5): "U*U".
        #expect(PasswordHash.check("U*U", against: "$2a$05$CCCCCCCCCCCCCCCCCCCCC.E5YPO9kmyuRGyh0XouQYb4YMJKvyOeW"))
        #expect(!PasswordHash.check("x", against: "not a hash"))
        #expect(!PasswordHash.check("x", against: ""))
    }

    // Proves a config-file user (seed 001's jane) becomes a principal with a bcrypt password, its
    // channels at the given sequence, and the admin REST form never shows the hash.
    @Test func configUserAndRESTForm() throws {
        let jane = try Principal.fromAdmin(
            restName: "jane", isRole: false,
            body: json(#"{"password":"password","disabled":false,"admin_channels":["_public","_jane"]}"#),
            existing: nil, sequence: 3)
        #expect(jane.checkPassword("password"))
        #expect(!jane.checkPassword("Password"))
        #expect(jane.adminChannelSequences == ["_public": 3, "_jane": 3])
        let rest = jane.json(includeSecrets: false)
        #expect(rest["name"] == .string("jane"))
        #expect(rest["admin_channels"] == json(#"["_jane","_public"]"#))
        #expect(rest["all_channels"] == json(#"["!","_jane","_public"]"#))
        #expect(rest["password"] == nil && rest["passwordhash_bcrypt"] == nil)
        #expect(!rest.text.contains("$2b$"))
        // Storage form round-trips exactly.
        let stored = jane.json(includeSecrets: true)
        #expect(try Principal(json: stored) == jane)
        #expect(try Principal(json: json(stored.text)) == jane)
    }

    // Proves PUT semantics: retained channels keep their grant sequence, new ones take the new one,
    // omitted fields are cleared, the password survives when absent, and a disabled user cannot log in.
    @Test func updateKeepsSequencesAndPassword() throws {
        let v1 = try Principal.fromAdmin(
            restName: "joe", isRole: false,
            body: json(
                #"{"password":"secret","admin_channels":["a","b"],"email":"joe@example.com","admin_roles":["ed"]}"#),
            existing: nil, sequence: 5)
        let v2 = try Principal.fromAdmin(
            restName: "joe", isRole: false, body: json(#"{"admin_channels":["b","c"],"disabled":true}"#),
            existing: v1, sequence: 9)
        #expect(v2.adminChannelSequences == ["b": 5, "c": 9])
        #expect(v2.email == nil && v2.adminRoles.isEmpty && v2.sequence == 9)
        #expect(v2.passwordHash == v1.passwordHash)
        #expect(!v2.checkPassword("secret"))
        var v3 = v2
        v3.disabled = false
        #expect(v3.checkPassword("secret"))
    }

    // Proves validation errors: bad names, non-string channels, illegal channel names, name mismatch,
    // missing and short passwords, bad emails, unknown members, role-only rules; GUEST needs no password.
    @Test func validation() throws {
        func err(_ name: String?, _ body: String, isRole: Bool = false) -> CouchError? {
            do {
                _ = try Principal.fromAdmin(
                    restName: name, isRole: isRole, body: json(body), existing: nil, sequence: 1)
                return nil
            } catch { return error }
        }
        #expect(err("bad name", #"{"password":"abc"}"#)?.reason.hasPrefix("Invalid name") == true)
        #expect(err("a:b", #"{"password":"abc"}"#)?.status == 400)
        #expect(
            err("x", #"{"password":"abc","admin_channels":[1]}"#)?.reason
                == "admin_channels must be an array of strings")
        #expect(
            err("x", #"{"password":"abc","admin_channels":"a"}"#)?.reason
                == "admin_channels must be an array of strings")
        #expect(err("x", #"{"password":"abc","admin_channels":["a,b"]}"#)?.reason == #"Illegal channel name "a,b""#)
        #expect(err("x", #"{"name":"y","password":"abc"}"#)?.reason == "Name mismatch (can't change name)")
        #expect(err(nil, #"{"password":"abc"}"#)?.reason == "Missing name property")
        #expect(err("x", #"{}"#)?.reason == "Empty passwords are not allowed")
        #expect(err("x", #"{"password":"ab"}"#)?.reason == "Passwords must be at least 3 characters")
        #expect(err("x", #"{"password":"abc","email":"nope"}"#)?.reason == "Invalid email address")
        #expect(err("x", #"{"password":"abc","colour":"red"}"#)?.reason.hasPrefix("Unknown property") == true)
        #expect(err("x", #"{"password":"abc","disabled":"yes"}"#)?.status == 400)
        #expect(err("r", #"{"password":"abc"}"#, isRole: true)?.reason.hasPrefix("Unknown property") == true)
        #expect(err("GUEST", #"{"disabled":false,"admin_channels":["*"]}"#) == nil)
        #expect(err(nil, #"{"name":"x","password":"abc","all_channels":["q"],"roles":[]}"#) == nil)
        let guest = try Principal.fromAdmin(
            restName: "GUEST", isRole: false, body: json(#"{"admin_channels":["*"]}"#), existing: nil, sequence: 1)
        #expect(guest.name == "" && guest.isGuest && guest.restName == "GUEST")
        #expect(!guest.checkPassword(""))
        #expect(guest.userContext() == UserContext(name: "", roles: [], channels: ["*", "!"]))
    }

    // Proves a role's REST form (no `!`, no user fields) and its storage round trip.
    @Test func roles() throws {
        let role = try Principal.fromAdmin(
            restName: "editor", isRole: true, body: json(#"{"admin_channels":["drafts"]}"#), existing: nil,
            sequence: 4)
        #expect(
            role.json(includeSecrets: false)
                == json(#"{"name":"editor","admin_channels":["drafts"],"all_channels":["drafts"]}"#))
        #expect(try Principal(json: role.json(includeSecrets: true)) == role)
    }
}
