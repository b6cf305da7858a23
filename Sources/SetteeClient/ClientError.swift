import SetteeProtocol

/// Everything a client operation can fail with. Messages name the key's operation and what to do.
public enum ClientError: Error, Equatable, Sendable, CustomStringConvertible {
    /// GET/REPLACE/REMOVE/TOUCH of a key that does not exist.
    case keyNotFound
    /// INSERT of a key that exists.
    case keyExists
    /// A CAS was given and the document has another one.
    case casMismatch
    /// APPEND/PREPEND of a missing key (memcached's NOT_STORED).
    case notStored
    /// INCREMENT/DECREMENT of a value that is not a decimal number.
    case deltaBadValue
    case valueTooLarge
    case invalidArguments(String)
    case locked
    /// The server kept answering TMPFAIL until the deadline.
    case temporaryFailure
    case outOfMemory
    case durabilityInvalidLevel
    /// The bucket cannot satisfy the level (e.g. majority with too few nodes).
    case durabilityImpossible
    /// A durable write's outcome is not known (server said SYNC_WRITE_AMBIGUOUS).
    case durabilityAmbiguous
    case syncWriteInProgress
    /// The deadline passed before a reply; for reads, and for writes never sent.
    case timeout(operation: String, afterMs: Int)
    /// A mutation was sent but no reply came (timeout or lost connection): it may or may not have been
    /// applied. Never retried automatically; read the key to find out.
    case ambiguous(operation: String, reason: String)
    case authenticationFailed(String)
    /// Authenticated, but the user's roles do not allow the request (e.g. opening a change stream).
    case accessDenied(String)
    case bucketNotFound(String)
    /// The node does not know the collection (UNKNOWN_COLLECTION / UNKNOWN_SCOPE): never created, dropped, or not
    /// yet in that node's manifest. The text names the collection, the bucket and the manifest uid the node has.
    case collectionNotFound(String)
    /// No node of the current map holds the vBucket, until the deadline.
    case noActiveNode(vbucket: UInt16)
    /// No seed answered with a usable config.
    case bootstrapFailed(String)
    case invalidConfig(String)
    /// A status this client has no case for.
    case server(status: UInt16, message: String)
    case closed

    public var description: String {
        switch self {
        case .keyNotFound: return "key not found"
        case .keyExists: return "key already exists"
        case .casMismatch: return "CAS mismatch: the document changed since it was read"
        case .notStored: return "not stored: the key does not exist"
        case .deltaBadValue: return "the stored value is not a decimal number"
        case .valueTooLarge: return "value too large"
        case .invalidArguments(let m): return "invalid arguments: \(m)"
        case .locked: return "document locked"
        case .temporaryFailure: return "temporary failure (server busy or warming up) until the deadline"
        case .outOfMemory: return "server out of memory"
        case .durabilityInvalidLevel: return "invalid durability level"
        case .durabilityImpossible: return "durability impossible with the bucket's current nodes and replicas"
        case .durabilityAmbiguous: return "durable write ambiguous: it may or may not have been committed"
        case .syncWriteInProgress: return "a durable write on this key is in progress"
        case .timeout(let op, let ms): return "\(op) timed out after \(ms) ms"
        case .ambiguous(let op, let r): return "\(op) outcome unknown (\(r)); it was not retried"
        case .authenticationFailed(let m): return "authentication failed: \(m)"
        case .accessDenied(let m): return "access denied: \(m)"
        case .bucketNotFound(let b): return "bucket \(b) not found or not accessible"
        case .collectionNotFound(let m): return "collection not found: \(m)"
        case .noActiveNode(let vb): return "no active node for vb:\(vb) in the cluster map"
        case .bootstrapFailed(let m): return "could not bootstrap: \(m)"
        case .invalidConfig(let m): return "invalid config: \(m)"
        case .server(let s, let m): return "server status 0x\(String(s, radix: 16))\(m.isEmpty ? "" : ": \(m)")"
        case .closed: return "client closed"
        }
    }

    /// The error for a final (non-retried) response status of `opcode`; nil for success.
    public static func from(status: Status, opcode: Opcode, message: String) -> ClientError? {
        switch status {
        case .success: return nil
        case .keyNotFound: return .keyNotFound
        case .keyExists: return opcode.loud == .add ? .keyExists : .casMismatch
        case .notStored: return opcode.loud == .add ? .keyExists : .notStored
        case .deltaBadValue: return .deltaBadValue
        case .valueTooLarge: return .valueTooLarge
        case .invalidArguments: return .invalidArguments(message)
        case .locked: return .locked
        case .temporaryFailure, .busy: return .temporaryFailure
        case .outOfMemory: return .outOfMemory
        case .durabilityInvalidLevel: return .durabilityInvalidLevel
        case .durabilityImpossible: return .durabilityImpossible
        case .syncWriteAmbiguous: return .durabilityAmbiguous
        case .syncWriteInProgress: return .syncWriteInProgress
        case .authError: return .authenticationFailed(message)
        case .accessDenied, .noBucket: return .bucketNotFound(message)
        case .unknownCollection, .unknownScope: return .collectionNotFound(message)
        default: return .server(status: status.rawValue, message: message)
        }
    }
}
