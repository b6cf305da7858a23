import SetteeCore
import SetteeJSON

/// One security or administration event, as one JSON line of the audit log (Couchbase Server's audit record:
/// `id`, `name`, `description`, `timestamp`, `real_userid {domain, user}`, `remote {ip, port}`, then fields of the
/// event's kind).
///
/// Ids: 8192 (login success) and 8193 (login failure) are ns_server's; every other kind is Settee's own, numbered
/// 40960 and up for the data node and 41984 and up for the gateway, so a consumer keyed on Couchbase's ids never
/// mistakes one for a Couchbase event. `AuditEvent.Kind.allCases` is the descriptor list (`GET
/// /settings/audit/descriptors`).
///
/// No secret is ever a field: the constructors take no password, proof, token or header, only names. User names,
/// document ids and gateway principal names are user data, marked `<ud>…</ud>` (`LogText.userData` at `.partial`,
/// whatever the process's log level: a collection tool hashes or strips them, `UserDataRedaction`).
public struct AuditEvent: Sendable, Equatable {
    /// What happened: the id, name and description every record of the kind carries.
    public enum Kind: Int, Sendable, CaseIterable {
        case loginSucceeded = 8192
        case loginFailed = 8193
        /// Refused before any password check: the login throttle (per user and source) held it back.
        case loginThrottled = 40960
        case userSet = 40961
        case userDeleted = 40962
        case bucketCreated = 40963
        case bucketModified = 40964
        case bucketDeleted = 40965
        case bucketFlushed = 40966
        case scopeCreated = 40967
        case scopeDropped = 40968
        case collectionCreated = 40969
        case collectionDropped = 40970
        case failover = 40971
        case rebalanceStarted = 40972
        case rebalanceEnded = 40973
        case certificateReloaded = 40974
        /// A caller with valid credentials whose roles do not allow the request (RBAC, 403).
        case accessDenied = 40975
        /// An administrator's REST read, write or delete of a document (`/pools/default/buckets/B/docs/ID`).
        case documentAccessed = 40976
        case auditSettingsChanged = 40977
        case logsCollectionStarted = 40978
        case internalSecretRotated = 40979
        /// Events the log's queue could not hold (`AuditLog`): written once the writer has room again.
        case eventsDropped = 40980
        case gatewayDatabaseConfigChanged = 41984
        case gatewayUserSet = 41985
        case gatewayUserDeleted = 41986
        case gatewayRoleSet = 41987
        case gatewayRoleDeleted = 41988
        case gatewayPurge = 41989
        case gatewayCompact = 41990

        /// The record's `name`.
        public var name: String {
            switch self {
            case .loginSucceeded: "login success"
            case .loginFailed: "login failure"
            case .loginThrottled: "login throttled"
            case .userSet: "set user"
            case .userDeleted: "delete user"
            case .bucketCreated: "create bucket"
            case .bucketModified: "modify bucket"
            case .bucketDeleted: "delete bucket"
            case .bucketFlushed: "flush bucket"
            case .scopeCreated: "create scope"
            case .scopeDropped: "drop scope"
            case .collectionCreated: "create collection"
            case .collectionDropped: "drop collection"
            case .failover: "failover node"
            case .rebalanceStarted: "rebalance initiated"
            case .rebalanceEnded: "rebalance completed"
            case .certificateReloaded: "reload node certificate"
            case .accessDenied: "access denied"
            case .documentAccessed: "document access"
            case .auditSettingsChanged: "modify audit configuration"
            case .logsCollectionStarted: "start logs collection"
            case .internalSecretRotated: "rotate internal secret"
            case .eventsDropped: "audit events dropped"
            case .gatewayDatabaseConfigChanged: "gateway database config"
            case .gatewayUserSet: "gateway set user"
            case .gatewayUserDeleted: "gateway delete user"
            case .gatewayRoleSet: "gateway set role"
            case .gatewayRoleDeleted: "gateway delete role"
            case .gatewayPurge: "gateway purge"
            case .gatewayCompact: "gateway compact"
            }
        }

        /// The record's `description`.
        public var description: String {
            switch self {
            case .loginSucceeded: "Successful login"
            case .loginFailed: "Unsuccessful attempt to login"
            case .loginThrottled: "Login refused by the throttle before any password check"
            case .userSet: "Local user created or changed"
            case .userDeleted: "Local user deleted"
            case .bucketCreated: "Bucket was created"
            case .bucketModified: "Bucket settings were changed"
            case .bucketDeleted: "Bucket was deleted"
            case .bucketFlushed: "Bucket was flushed"
            case .scopeCreated: "Scope was created"
            case .scopeDropped: "Scope was dropped"
            case .collectionCreated: "Collection was created"
            case .collectionDropped: "Collection was dropped"
            case .failover: "Node was failed over"
            case .rebalanceStarted: "Rebalance was started"
            case .rebalanceEnded: "Rebalance ended"
            case .certificateReloaded: "Node certificate was reloaded"
            case .accessDenied: "Request refused: the caller's roles do not allow it"
            case .documentAccessed: "Document read or changed through the admin REST API"
            case .auditSettingsChanged: "Audit configuration was changed"
            case .logsCollectionStarted: "Logs collection was started"
            case .internalSecretRotated: "The cluster's internal secret was rotated"
            case .eventsDropped: "Audit events were dropped: the writer's queue was full"
            case .gatewayDatabaseConfigChanged: "Gateway database created, changed or deleted"
            case .gatewayUserSet: "Gateway user created or changed"
            case .gatewayUserDeleted: "Gateway user deleted"
            case .gatewayRoleSet: "Gateway role created or changed"
            case .gatewayRoleDeleted: "Gateway role deleted"
            case .gatewayPurge: "Documents purged through the gateway's admin API"
            case .gatewayCompact: "Gateway database compaction requested"
            }
        }
    }

    /// Where a login or request came from: the peer's address and port (`remote`).
    public struct Remote: Sendable, Equatable {
        public var ip: String
        public var port: Int?
        public init(ip: String, port: Int? = nil) {
            self.ip = ip
            self.port = port
        }
    }

    public var kind: Kind
    /// The caller: `domain` is `admin` (the cluster administrator), `local` (an RBAC user), `builtin` (the node's
    /// internal user), `gateway` (a gateway user) or `anonymous`; `user` the name as sent.
    public var user: (domain: String, name: String)?
    public var remote: Remote?
    /// The event's own fields (`bucket_name`, `scope_name`, `path`, …): names and numbers only, never secrets.
    public var fields: [(String, JSON)]

    /// An event of `kind`; `user` and `remote` when known.
    public init(
        _ kind: Kind, user: (domain: String, name: String)? = nil, remote: Remote? = nil,
        fields: [(String, JSON)] = []
    ) {
        self.kind = kind
        self.user = user
        self.remote = remote
        self.fields = fields
    }

    public static func == (a: AuditEvent, b: AuditEvent) -> Bool {
        a.kind == b.kind && a.user?.domain == b.user?.domain && a.user?.name == b.user?.name && a.remote == b.remote
            && JSON.object(a.fields) == JSON.object(b.fields)
    }

    /// The record as one JSON object, `timestamp` given (ISO 8601, UTC, milliseconds: `AuditTimestamp`).
    public func record(timestamp: String) -> JSON {
        var members: [(String, JSON)] = [
            ("id", .int(kind.rawValue)), ("name", .string(kind.name)), ("description", .string(kind.description)),
            ("timestamp", .string(timestamp)),
        ]
        if let user {
            members.append(
                (
                    "real_userid",
                    .object([("domain", .string(user.domain)), ("user", .string(Self.userData(user.name)))])
                ))
        }
        if let remote {
            var r: [(String, JSON)] = [("ip", .string(remote.ip))]
            if let port = remote.port { r.append(("port", .int(port))) }
            members.append(("remote", .object(r)))
        }
        members.append(contentsOf: fields)
        return .object(members)
    }

    /// User data as every audit record carries it: escaped and marked `<ud>…</ud>`.
    public static func userData(_ text: some StringProtocol) -> String { LogText.userData(text, level: .partial) }
}

// MARK: Constructors, one per kind of event (what each carries is its parameters).

extension AuditEvent {
    /// `source`: which door (`kv-sasl`, `rest`, `console`, `views`, `gateway-basic`, `gateway-session`).
    public static func loginSucceeded(
        domain: String, user: String, source: String, remote: Remote?, mechanism: String? = nil
    ) -> AuditEvent {
        var f: [(String, JSON)] = [("source", .string(source))]
        if let mechanism { f.append(("mechanism", .string(mechanism))) }
        return AuditEvent(.loginSucceeded, user: (domain, user), remote: remote, fields: f)
    }

    /// A wrong user name or password (the record does not say which, as the answer does not).
    public static func loginFailed(user: String, source: String, remote: Remote?, mechanism: String? = nil)
        -> AuditEvent
    {
        var f: [(String, JSON)] = [("source", .string(source))]
        if let mechanism { f.append(("mechanism", .string(mechanism))) }
        return AuditEvent(.loginFailed, user: ("unknown", user), remote: remote, fields: f)
    }

    /// A login the throttle refused before any check (the per-(user, source) lockout), with the wait it answered.
    public static func loginThrottled(user: String, source: String, remote: Remote?, retryAfterSeconds: Int)
        -> AuditEvent
    {
        AuditEvent(
            .loginThrottled, user: ("unknown", user), remote: remote,
            fields: [("source", .string(source)), ("retry_after", .int(retryAfterSeconds))])
    }

    /// A request refused by RBAC: `method` and `path` as sent (the path is user data: it may name documents).
    public static func accessDenied(
        domain: String, user: String, remote: Remote?, method: String, path: String
    ) -> AuditEvent {
        AuditEvent(
            .accessDenied, user: (domain, user), remote: remote,
            fields: [("method", .string(method)), ("path", .string(userData(path)))])
    }
}
