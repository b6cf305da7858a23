import NIOCore
import SetteeCore
import SetteeProtocol

/// A bootstrap address: an admin (HTTP) port or a KV port.
public enum Seed: Sendable, Hashable, CustomStringConvertible {
    /// `GET /pools/default/b/<bucket>` on this admin port.
    case http(NodeAddress)
    /// HELLO + SASL + SELECT_BUCKET + GET_CLUSTER_CONFIG on this KV port.
    case kv(NodeAddress)

    /// Parses `http://H:P`, `couchbase://H:P` / `kv://H:P`, or a bare `H:P` (a KV port).
    public init?(_ text: String) {
        var s = Substring(text)
        var isHTTP = false
        if s.hasPrefix("http://") {
            s = s.dropFirst(7)
            isHTTP = true
        } else if s.hasPrefix("couchbase://") {
            s = s.dropFirst(12)
        } else if s.hasPrefix("kv://") {
            s = s.dropFirst(5)
        }
        while s.hasSuffix("/") { s = s.dropLast() }
        if !s.contains(":") { s += isHTTP ? ":8091" : ":11210" }
        guard let addr = splitHostPort(String(s)) else { return nil }
        self = isHTTP ? .http(addr) : .kv(addr)
    }

    public var description: String {
        switch self {
        case .http(let a): return "http://\(a)"
        case .kv(let a): return "couchbase://\(a)"
        }
    }
}

/// How a `BucketClient` reaches and talks to the cluster.
public struct ClientOptions: Sendable {
    /// Tried in order until one yields a config.
    public var seeds: [Seed]
    public var bucket: String
    /// SASL PLAIN / HTTP Basic credentials; nil connects without authenticating.
    public var username: String?
    public var password: String?
    /// Deadline of one operation, retries included.
    public var operationTimeoutMs: Int
    /// Deadline of opening one KV connection.
    public var connectTimeoutMs: Int
    /// Period of the background config poll; 0 turns it off.
    public var configPollIntervalMs: Int
    public var retryPolicy: RetryPolicy

    public init(
        seeds: [Seed], bucket: String, username: String? = nil, password: String? = nil,
        operationTimeoutMs: Int = ClientLimits.defaultOperationTimeoutMs,
        connectTimeoutMs: Int = ClientLimits.connectTimeoutMs,
        configPollIntervalMs: Int = ClientLimits.configPollIntervalMs, retryPolicy: RetryPolicy = RetryPolicy()
    ) {
        self.seeds = seeds
        self.bucket = bucket
        self.username = username
        self.password = password
        self.operationTimeoutMs = operationTimeoutMs
        self.connectTimeoutMs = connectTimeoutMs
        self.configPollIntervalMs = configPollIntervalMs
        self.retryPolicy = retryPolicy
    }
}

/// A document as GET returns it.
public struct GetResult: Sendable, Equatable {
    public var value: [UInt8]
    public var flags: UInt32
    public var cas: CAS
    public var datatype: UInt8
}

/// Identifies a mutation in its vBucket's history (vBucket, its UUID, the seqno it got).
public struct MutationToken: Sendable, Equatable {
    public var vbucket: VBucketID
    public var vbucketUUID: VBucketUUID
    public var seqno: SeqNo
}

/// What a successful mutation returns.
public struct MutationResult: Sendable, Equatable {
    public var cas: CAS
    /// Present when the server negotiated MutationSeqno.
    public var token: MutationToken?
}

/// A counter's new value.
public struct CounterResult: Sendable, Equatable {
    public var value: UInt64
    public var cas: CAS
    public var token: MutationToken?
}
