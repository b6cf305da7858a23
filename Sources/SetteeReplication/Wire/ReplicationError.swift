import SetteeJSON

/// Why a replication step failed. `isTransient` decides between retrying with backoff and stopping.
public enum ReplicationError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The peer answered with an HTTP error (`error`/`reason` from its JSON body when present).
    case http(status: Int, error: String, reason: String)
    /// Connection refused or reset, DNS, TLS, timeout: the peer may come back.
    case network(String)
    /// The peer answered something this client cannot read.
    case badResponse(String)
    /// The replication's own configuration is unusable (bad URL, ...).
    case invalid(String)

    /// Worth retrying later: network errors, 408/429 and 5xx answers; not 4xx (a wrong password or a
    /// missing database does not fix itself) and not unreadable answers.
    public var isTransient: Bool {
        switch self {
        case .network: return true
        case .http(let status, let error, let reason):
            return CouchError(status: status, error: error, reason: reason).isTransient
        case .badResponse, .invalid: return false
        }
    }

    public var description: String {
        switch self {
        case .http(let status, let error, let reason): return "HTTP \(status) \(error): \(reason)"
        case .network(let m): return "network: \(m)"
        case .badResponse(let m): return "bad response: \(m)"
        case .invalid(let m): return "invalid: \(m)"
        }
    }
}
