import Foundation
import Logging
import NIOPosix
import SetteeAuth
import SetteeCore
import SetteeDocument
import SetteeJSON
import SetteeSync
import Synchronization

extension GatewayDatabase {
    /// The context a request of user `name` runs in (`""`: GUEST); nil when unknown or disabled.
    public func userContext(_ name: String) -> UserContext? {
        index.withLock { idx in
            guard let u = idx.users[name], !u.disabled else { return nil }
            return UserContext(
                name: name, roles: Set(idx.userRoles(name).keys), channels: Set(idx.userChannels(name).keys))
        }
    }

    /// Basic authentication: nil for an unknown or disabled user or a wrong password. The hash check runs
    /// on a dispatch queue, never on the caller's executor.
    public func authenticate(name: String, password: String) async -> UserContext? {
        let internalName = name == "GUEST" ? "" : name
        guard !internalName.isEmpty else { return nil }
        guard let hash = index.withLock({ $0.users[internalName] }).flatMap({ $0.disabled ? nil : $0.passwordHash })
        else {
            // An unknown or disabled user costs a bcrypt run like a known one, so timing does not tell which
            // names exist.
            if let decoy = Self.decoyPasswordHash { _ = await PasswordHashing.verify(password, hash: decoy) }
            return nil
        }
        let digest = verifiedPasswords.withLock { $0.digester }.digest(hash, internalName, password)
        if !verifiedPasswords.withLock({ $0.matches(internalName, digest) }) {
            guard await PasswordHashing.verify(password, hash: hash) else { return nil }
            verifiedPasswords.withLock { $0.insert(internalName, digest) }
        }
        return userContext(internalName)
    }

    /// A bcrypt hash (at the configured cost) no password is expected to match, checked for unknown users.
    static let decoyPasswordHash: String? = PasswordHasher.hash("settee-decoy-" + newDocID())

    /// The GUEST context, nil when GUEST is disabled (the default unless the config enables it).
    public func guestContext() async -> UserContext? { userContext("") }

    // MARK: sessions

    /// Creates a session for `user` (admin `POST /db/_session`, or after a public login).
    public func createSession(user: String, ttlSeconds: Int) async throws(GatewayError) -> (id: String, expires: Double)
    {
        if user.isEmpty || user == "GUEST" { throw .badRequest("Invalid or missing user name") }
        guard ttlSeconds >= 1 else { throw .badRequest("Invalid session time-to-live") }
        guard index.withLock({ $0.users[user] }) != nil else { throw .notFound("No such user") }
        let ttl = min(ttlSeconds, Limits.gatewayMaxSessionTTLSeconds)
        let id = Self.newDocID() + Self.newDocID().prefix(8)
        let expires = Date().timeIntervalSince1970 + Double(ttl)
        let value = JSON.object([
            ("id", .string(id)), ("username", .string(user)), ("expiration", .number(expires.rounded())),
            ("ttl", .number(Double(ttl))),
        ])
        let expiry: UInt32 = ttl <= 30 * 24 * 3600 ? UInt32(ttl) : UInt32(clamping: Int(expires))
        let bucket = self.bucket
        _ = try await bucketCall { () async throws(GatewayBucketError) in
            try await bucket.insert(sessionPrefix + id, value: value.serialized(), expiry: expiry)
        }
        return (id, expires.rounded())
    }

    /// The user of a live session; nil when it is unknown, expired, or its user is gone or disabled.
    public func session(_ id: String) async -> UserContext? {
        guard let info = await sessionInfo(id) else { return nil }
        return userContext(info.user)
    }

    /// A live session's user name and expiry (epoch seconds).
    public func sessionInfo(_ id: String) async -> (user: String, expires: Double)? {
        guard !id.isEmpty, let item = try? await bucket.get(sessionPrefix + id),
            let json = try? JSON.parse(item.value), let user = json["username"]?.stringValue,
            let expires = json["expiration"]?.numberValue, expires > Date().timeIntervalSince1970
        else { return nil }
        return (user, expires)
    }

    public func deleteSession(_ id: String) async {
        guard !id.isEmpty else { return }
        _ = try? await bucket.remove(sessionPrefix + id, cas: .zero)
    }

    // MARK: principals (admin `_user/`, `_role/`)

    static func internalName(_ name: String, isRole: Bool) -> String {
        !isRole && name == "GUEST" ? "" : name
    }

    /// Admin `GET /db/_user/name` (or `_role/`): explicit and computed channels and roles, no password.
    public func principal(_ name: String, isRole: Bool) async throws(GatewayError) -> JSON {
        let n = Self.internalName(name, isRole: isRole)
        let json = index.withLock { idx -> JSON? in
            guard let p = isRole ? idx.roles[n] : idx.users[n] else { return nil }
            var m: [(String, JSON)] = [("name", .string(isRole || !n.isEmpty ? n : "GUEST"))]
            m.append(("admin_channels", .array(p.adminChannels.keys.sorted().map { .string($0) })))
            let all = isRole ? idx.roleChannels(n) : idx.userChannels(n)
            m.append(("all_channels", .array(all.keys.sorted().map { .string($0) })))
            if !isRole {
                if let e = p.email { m.append(("email", .string(e))) }
                if p.disabled { m.append(("disabled", .bool(true))) }
                m.append(("admin_roles", .array(p.adminRoles.keys.sorted().map { .string($0) })))
                m.append(("roles", .array(idx.userRoles(n).keys.sorted().map { .string($0) })))
            }
            return .object(m)
        }
        guard let json else { throw .notFound("missing") }
        return json
    }

    /// Admin `PUT /db/_user/name`: replaces the admin-settable fields (a missing `password` keeps the
    /// old one). True when the principal was created.
    public func putPrincipal(_ name: String, isRole: Bool, _ body: JSON) async throws(GatewayError) -> Bool {
        try await putPrincipal(name, isRole: isRole, body, allowEmptyPassword: false)
    }

    func putPrincipal(
        _ name: String, isRole: Bool, _ body: JSON, allowEmptyPassword: Bool
    ) async throws(GatewayError) -> Bool {
        guard case .object = body else { throw .badRequest("Principal must be a JSON object") }
        let n = Self.internalName(name, isRole: isRole)
        if let bodyName = body["name"]?.stringValue, Self.internalName(bodyName, isRole: isRole) != n {
            throw .badRequest("Name mismatch")
        }
        // The rules and bounds SetteeSync's `Principal.fromAdmin` applies (names, channel names, list lengths,
        // password length): this path checked only the characters of the name.
        guard Names.isValidPrincipalName(n) else { throw .badRequest("Invalid name") }
        let password = body["password"]?.stringValue
        if let password, password.count < 3 { throw .badRequest("Passwords must be at least 3 characters") }
        if let password, password.utf8.count > Limits.maxPasswordLength {
            throw .badRequest("Passwords must be at most \(Limits.maxPasswordLength) bytes")
        }
        let email = body["email"]?.stringValue
        if let email, email.utf8.count > Limits.maxEmailLength || !Principal.isValidEmail(email) {
            throw .badRequest("Invalid email address")
        }
        let channels = try Self.stringList(body["admin_channels"], "admin_channels")
        for c in channels where !Names.isValidChannelName(c) {
            throw .badRequest("Illegal channel name \(JSON.string(c).text)")
        }
        let roles = isRole ? [] : try Self.stringList(body["admin_roles"], "admin_roles")
        for role in roles {
            let bare = role.hasPrefix(Names.rolePrefix) ? String(role.dropFirst(Names.rolePrefix.count)) : role
            guard !bare.isEmpty, Names.isValidPrincipalName(bare) else {
                throw .badRequest("Invalid role name \(JSON.string(role).text)")
            }
        }
        var hash: String? = nil
        if let password {
            // bcrypt cannot take a NUL (C would cut the password there): refuse it instead of hashing.
            guard let h = await PasswordHashing.hash(password) else {
                throw .badRequest("Passwords must not contain NUL")
            }
            hash = h
        }
        let key = PrincipalRecord.key(n, isRole: isRole)
        let bucket = self.bucket
        for _ in 0..<Limits.gatewayWriteRetries {
            let item = try await bucketCall { () async throws(GatewayBucketError) in try await bucket.get(key) }
            let old = item.flatMap { try? JSON.parse($0.value) }.flatMap { PrincipalRecord(json: $0, isRole: isRole) }
            if old == nil && hash == nil && !isRole && !n.isEmpty && !allowEmptyPassword {
                throw .badRequest("Empty passwords are not allowed")
            }
            let seq = try await allocateSequence()
            var p = old ?? PrincipalRecord(name: n, isRole: isRole)
            p.adminChannels = Dictionary(uniqueKeysWithValues: channels.map { ($0, old?.adminChannels[$0] ?? seq) })
            p.adminRoles = Dictionary(uniqueKeysWithValues: roles.map { ($0, old?.adminRoles[$0] ?? seq) })
            if let hash { p.passwordHash = hash }
            p.email = email
            p.disabled = body["disabled"]?.boolValue ?? false
            p.sequence = seq
            p.recentSequences.append(seq)
            if p.recentSequences.count > Limits.gatewayRecentSequences { p.recentSequences.removeFirst() }
            let value = p.json().serialized()
            let cas: CAS
            do {
                if let item {
                    cas = try await bucket.replace(key, value: value, cas: item.cas, expiry: 0)
                } else {
                    cas = try await bucket.insert(key, value: value, expiry: 0)
                }
            } catch .exists {
                await releaseSequence(seq)
                continue
            } catch .notFound {
                await releaseSequence(seq)
                continue
            } catch {
                await releaseSequence(seq)
                throw GatewayError.bucket(error)
            }
            // Ahead of the change stream (ADR 0098).
            noteAheadOfStream(key, cas: cas)
            applyPrincipal(p, name: n, isRole: isRole)
            return old == nil
        }
        throw .unavailable("Too many concurrent updates of \(name)")
    }

    /// Admin `DELETE /db/_user/name`.
    public func deletePrincipal(_ name: String, isRole: Bool) async throws(GatewayError) {
        let n = Self.internalName(name, isRole: isRole)
        let bucket = self.bucket
        let key = PrincipalRecord.key(n, isRole: isRole)
        let cas: CAS
        do { cas = try await bucket.remove(key, cas: .zero) } catch .notFound {
            throw .notFound("missing")
        } catch { throw GatewayError.bucket(error) }
        noteAheadOfStream(key, cas: cas)
        applyPrincipal(nil, name: n, isRole: isRole)
    }

    /// Admin `GET /db/_user/`: names in order (GUEST not listed).
    public func principalNames(isRole: Bool) async -> [String] {
        index.withLock { idx in (isRole ? Array(idx.roles.keys) : Array(idx.users.keys)).filter { !$0.isEmpty }.sorted()
        }
    }

    /// Applies the config file's users and roles; a principal already stored as configured is left alone.
    func applyConfigPrincipals() async throws(GatewayError) {
        for (name, json) in options.roles.sorted(by: { $0.key < $1.key }) where !configMatches(name, json, isRole: true)
        {
            _ = try await putPrincipal(name, isRole: true, json, allowEmptyPassword: true)
        }
        for (name, json) in options.users.sorted(by: { $0.key < $1.key }) {
            let n = Self.internalName(name, isRole: false)
            if configMatches(n, json, isRole: false) {
                if let pw = json["password"]?.stringValue, let hash = index.withLock({ $0.users[n]?.passwordHash }),
                    await PasswordHashing.verify(pw, hash: hash)
                {
                    continue
                }
                if json["password"] == nil { continue }
            }
            _ = try await putPrincipal(name, isRole: false, json, allowEmptyPassword: true)
        }
    }

    private func configMatches(_ name: String, _ json: JSON, isRole: Bool) -> Bool {
        index.withLock { idx in
            guard let p = isRole ? idx.roles[name] : idx.users[name] else { return false }
            let channels = Set((json["admin_channels"]?.arrayValue ?? []).compactMap(\.stringValue))
            let roles = Set((json["admin_roles"]?.arrayValue ?? []).compactMap(\.stringValue))
            return Set(p.adminChannels.keys) == channels && (isRole || Set(p.adminRoles.keys) == roles)
                && p.disabled == (json["disabled"]?.boolValue ?? false) && p.email == json["email"]?.stringValue
        }
    }

    static func stringList(_ json: JSON?, _ field: String) throws(GatewayError) -> [String] {
        guard let json, !json.isNull else { return [] }
        guard let items = json.arrayValue else { throw .badRequest("\(field) must be an array of strings") }
        guard items.count <= Limits.maxChannelsPerGrant else { throw .badRequest("\(field) has too many entries") }
        var out: [String] = []
        for item in items {
            guard let s = item.stringValue else { throw .badRequest("\(field) must be an array of strings") }
            out.append(s)
        }
        return Array(Set(out)).sorted()
    }

}

/// Password hashes, computed and checked on NIO's process-wide blocking pool (`NIOThreadPool.singleton`, a fixed
/// number of threads; calls beyond them queue), so slow hashes never run on the caller's executor and a login flood
/// cannot start a thread per attempt. The seam to SetteeSync's bcrypt.
enum PasswordHashing {
    static func hash(_ password: String) async -> String? {
        (try? await NIOThreadPool.singleton.runIfActive { PasswordHasher.hash(password) }) ?? nil
    }

    static func verify(_ password: String, hash: String) async -> Bool {
        (try? await NIOThreadPool.singleton.runIfActive { PasswordHasher.verify(password, hash: hash) }) ?? false
    }
}
