import SetteeCore
import SetteeJSON

extension Principal {
    /// Members an admin body (or a config-file `users`/`roles` entry) may carry. The computed
    /// `all_channels`/`roles` are accepted and ignored, so a GET body can be PUT back.
    private static let userFields: Set<String> = [
        "name", "password", "admin_channels", "all_channels", "admin_roles", "roles", "email", "disabled",
    ]
    private static let roleFields: Set<String> = ["name", "admin_channels", "all_channels"]

    /// Applies an admin REST body to a user or role: `PUT /db/_user/NAME` (full replace of the
    /// admin-settable fields: omitted `admin_channels`/`admin_roles`/`email` are cleared, `password`
    /// changes only when present), `POST /db/_user/` (`restName` nil: the body's `name`), or a config
    /// file entry. `existing` is the stored principal (nil: create). `sequence` is the freshly allocated
    /// sequence of this change: new explicit grants become visible at it. Hashes a new password with
    /// bcrypt (blocking, tens of milliseconds: call off event loops). 400 with Sync Gateway's reasons.
    public static func fromAdmin(
        restName: String?, isRole: Bool, body: JSON, existing: Principal?, sequence: UInt64,
        allowEmptyPassword: Bool = false
    ) throws(CouchError) -> Principal {
        guard let members = body.objectValue else { throw .badRequest("Request body must be a JSON object") }
        let allowed = isRole ? roleFields : userFields
        for (key, _) in members where !allowed.contains(key) {
            throw .badRequest("Unknown property \"\(key)\" for a \(isRole ? "role" : "user")")
        }
        let bodyName: String?
        switch body["name"] {
        case nil, .null?: bodyName = nil
        case .string(let s)?: bodyName = s
        default: throw .badRequest("name must be a string")
        }
        guard let rest = restName ?? bodyName else { throw .badRequest("Missing name property") }
        if let bodyName, bodyName != rest { throw .badRequest("Name mismatch (can't change name)") }
        let name = internalName(restName: rest, isRole: isRole)
        guard Names.isValidPrincipalName(name), isRole ? !name.isEmpty : true else {
            throw .badRequest("Invalid name \(JSON.string(rest).text)")
        }
        if let existing {
            precondition(existing.name == name && existing.isRole == isRole, "existing principal is another one")
        }
        var p = existing ?? Principal(name: name, isRole: isRole)
        p.sequence = sequence
        p.adminChannels = try channels(body["admin_channels"], "admin_channels")
        if isRole { return p }

        p.adminRoles = try roleNames(body["admin_roles"])
        switch body["email"] {
        case nil, .null?: p.email = nil
        case .string(let e)?:
            guard e.utf8.count <= Limits.maxEmailLength, isValidEmail(e) else {
                throw .badRequest("Invalid email address")
            }
            p.email = e
        default: throw .badRequest("email must be a string")
        }
        switch body["disabled"] {
        case nil, .null?: p.disabled = false
        case .bool(let b)?: p.disabled = b
        default: throw .badRequest("disabled must be true or false")
        }
        switch body["password"] {
        case nil, .null?:
            if existing == nil && !p.isGuest && !allowEmptyPassword {
                throw .badRequest("Empty passwords are not allowed")
            }
        case .string(let pw)?:
            if pw.isEmpty && !p.isGuest && !allowEmptyPassword { throw .badRequest("Empty passwords are not allowed") }
            if !pw.isEmpty {
                guard pw.utf8.count >= Limits.minPasswordLength else {
                    throw .badRequest("Passwords must be at least \(Limits.minPasswordLength) characters")
                }
                guard pw.utf8.count <= Limits.maxPasswordLength, !pw.utf8.contains(0) else {
                    throw .badRequest("Passwords must be at most \(Limits.maxPasswordLength) bytes, without NUL")
                }
                guard let hash = hashPassword(pw) else {
                    throw .badRequest("Passwords must be at most \(Limits.maxPasswordLength) bytes, without NUL")
                }
                p.passwordHash = hash
            }
        default: throw .badRequest("password must be a string")
        }
        return p
    }

    private static func channels(_ json: JSON?, _ field: String) throws(CouchError) -> Set<String> {
        var out = Set<String>()
        for s in try strings(json, field) {
            guard Names.isValidChannelName(s) else { throw .badRequest("Illegal channel name \(JSON.string(s).text)") }
            out.insert(s)
        }
        return out
    }

    private static func roleNames(_ json: JSON?) throws(CouchError) -> Set<String> {
        var out = Set<String>()
        for s in try strings(json, "admin_roles") {
            let bare = s.hasPrefix(Names.rolePrefix) ? String(s.dropFirst(Names.rolePrefix.count)) : s
            guard !bare.isEmpty, Names.isValidPrincipalName(bare) else {
                throw .badRequest("Invalid role name \(JSON.string(s).text)")
            }
            out.insert(bare)
        }
        return out
    }

    private static func strings(_ json: JSON?, _ field: String) throws(CouchError) -> [String] {
        guard let json, !json.isNull else { return [] }
        guard let items = json.arrayValue else { throw .badRequest("\(field) must be an array of strings") }
        guard items.count <= Limits.maxChannelsPerGrant else { throw .badRequest("\(field) has too many entries") }
        var out: [String] = []
        out.reserveCapacity(items.count)
        for item in items {
            guard let s = item.stringValue else { throw .badRequest("\(field) must be an array of strings") }
            out.append(s)
        }
        return out
    }

    /// `^[-+.\w]+@\w[-.\w]+$` (Sync Gateway's pattern).
    public static func isValidEmail(_ email: String) -> Bool {
        let parts = email.split(separator: "@", omittingEmptySubsequences: false)
        guard parts.count == 2, let first = parts[1].unicodeScalars.first, !parts[0].isEmpty,
            parts[1].unicodeScalars.count >= 2
        else { return false }
        func word(_ c: Unicode.Scalar) -> Bool {
            c == "_" || c.properties.isAlphabetic || c.properties.numericType == .decimal
        }
        return parts[0].unicodeScalars.allSatisfy { word($0) || $0 == "-" || $0 == "+" || $0 == "." }
            && word(first) && parts[1].unicodeScalars.allSatisfy { word($0) || $0 == "-" || $0 == "." }
    }
}
