import SetteeAuth
import SetteeClusterMap
import SetteeCore
import SetteeProtocol
import SetteeRegistry
import SetteeStorage

/// What one KV connection has negotiated and who it is. Plain value owned by its handler, touched
/// only on the connection's event loop.
///
/// States:
/// ```
///   fresh ──SASL ok──▶ authenticated(principal) ──SELECT_BUCKET──▶ bucket selected
///     │                                                               ▲
///     └──(exactly one authType=none bucket exists)── implicit bucket ─┘
/// ```
/// Invariants: (1) `selectedBucket` is only set by SELECT_BUCKET after an access check, or by a
/// bucket principal's login; (2) an unauthenticated connection uses the implicit no-auth bucket,
/// looked up on every request so a bucket created or deleted later is seen at once.
struct ConnectionState {
    var principal: NodeRegistry.Principal?
    /// A SCRAM exchange between SASL_AUTH and SASL_STEP.
    var scram: PendingScram?
    var selectedBucket: String?
    var agent: String = ""
    /// Whether the client sent HELLO: it speaks Couchbase's dialect (e.g. expects the tombstone's CAS
    /// in a DELETE response, where plain memcached answers CAS 0).
    var saidHello = false
    // Negotiated HELLO features.
    var mutationSeqno = false
    var json = false
    var xerror = false
    var tcpNoDelay = false
    var syncReplication = false
    var preserveTTL = false
    var altRequest = false
    /// UnorderedExecution (0x0e): a durable write waiting for its level answers when done, not holding
    /// back the responses of later requests (matched by opaque).
    var unorderedExecution = false
    /// Duplex (0x0c) and ClustermapChangeNotification (0x0d), both agreed: the node pushes new configs.
    var duplex = false
    var clustermapNotifications = false
    /// Collections (0x12): document keys start with a LEB128 collection id (only the default, 0, exists).
    var collections = false
    /// XATTR (0x06): the connection may store values that carry an XATTR section (datatype bit 0x04).
    var xattr = false

    var isAuthenticated: Bool { principal != nil }

    func mayAccess(bucket: String, settings: BucketSettings) -> Bool {
        switch principal {
        case .admin?: return true
        case .bucket(let name)?: return name == bucket
        // Any privilege anywhere in the bucket, `data_reader[b:s:c]` included, as kv_engine's SELECT_BUCKET (ADR 0141).
        case .user(_, let roles)?: return roles.grantsAnywhere(inBucket: bucket).contains(.readConfig)
        case nil: return BucketGrants.anonymous(bucketHasNoPassword: settings.authType == .none).contains(.readConfig)
        }
    }
}
