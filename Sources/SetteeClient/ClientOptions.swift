import NIOCore
import SetteeCore
import SetteeProtocol
import SetteeTLS

/// A bootstrap address: an admin (HTTP) port or a KV port.
public enum Seed: Sendable, Hashable, CustomStringConvertible {
    /// `GET /pools/default/b/<bucket>` on this admin port.
    case http(NodeAddress)
    /// HELLO + SASL + SELECT_BUCKET + GET_CLUSTER_CONFIG on this KV port.
    case kv(NodeAddress)

    /// Parses `http://H:P`, `couchbase://H:P` / `kv://H:P`, or a bare `H:P` (a KV port); `https://H:P` and
    /// `couchbases://H:P` (default ports 18091 and 11207) name TLS ports: `Seed.isTLS` tells a caller to set
    /// `ClientOptions.tls`.
    public init?(_ text: String) {
        var s = Substring(text)
        var isHTTP = false
        let tls = Self.isTLS(text)
        if s.hasPrefix("http://") || s.hasPrefix("https://") {
            s = s.dropFirst(tls ? 8 : 7)
            isHTTP = true
        } else if s.hasPrefix("couchbase://") || s.hasPrefix("couchbases://") {
            s = s.dropFirst(tls ? 13 : 12)
        } else if s.hasPrefix("kv://") {
            s = s.dropFirst(5)
        }
        while s.hasSuffix("/") { s = s.dropLast() }
        if !s.contains(":") { s += isHTTP ? (tls ? ":18091" : ":8091") : (tls ? ":11207" : ":11210") }
        guard let addr = splitHostPort(String(s)) else { return nil }
        self = isHTTP ? .http(addr) : .kv(addr)
    }

    /// Whether a seed's text names a TLS port (`couchbases://`, `https://`).
    public static func isTLS(_ text: String) -> Bool {
        text.hasPrefix("couchbases://") || text.hasPrefix("https://")
    }

    public var description: String {
        switch self {
        case .http(let a): return "http://\(a)"
        case .kv(let a): return "couchbase://\(a)"
        }
    }
}

extension TLSTrust {
    /// The trust for a command line's seeds and TLS flags (`--cacert FILE`, `--cert-pin sha256:HEX`): nil for
    /// plain seeds without flags. TLS seeds (`couchbases://`, `https://`) need exactly one of the two, so
    /// verification is never off; mixing TLS and plain seeds, or TLS flags with plain seeds, is refused
    /// rather than half of the traffic going out in clear.
    public static func forSeeds(_ seeds: [String], caFile: String?, pin: String?) throws -> TLSTrust? {
        let tls = seeds.filter { Seed.isTLS($0) }.count
        if caFile != nil && pin != nil { throw TLSSetupError("give --cacert or --cert-pin, not both") }
        if tls == 0 {
            guard caFile == nil && pin == nil else {
                throw TLSSetupError("--cacert/--cert-pin need couchbases:// or https:// addresses")
            }
            return nil
        }
        guard tls == seeds.count else {
            throw TLSSetupError("mix of TLS (couchbases://, https://) and plain addresses: use one kind")
        }
        if let caFile { return .authority(path: caFile) }
        if let pin { return try TLSTrust.pin(pin) }
        throw TLSSetupError(
            "couchbases:// and https:// need --cacert FILE or --cert-pin sha256:HEX to verify the cluster's "
                + "certificate")
    }
}

/// How a `BucketClient` reaches and talks to the cluster.
public struct ClientOptions: Sendable {
    /// Tried in order until one yields a config.
    public var seeds: [Seed]
    public var bucket: String
    /// SASL (SCRAM-SHA512, else the strongest SCRAM the node offers) / HTTP Basic credentials; nil connects
    /// without authenticating.
    public var username: String?
    public var password: String?
    /// TLS on every connection (KV and admin), verified against this trust; nil: plain TCP. Set, the client
    /// uses only the TLS ports a config advertises (`kvSSL`, `mgmtSSL`) and never falls back to plain ones.
    public var tls: TLSTrust?
    /// Whether the password may be sent with SASL PLAIN to a node that offers no SCRAM mechanism over a clear
    /// connection (over TLS it may anyway). Off: PLAIN in clear hands the password to anyone on the path.
    public var allowPlainAuthentication = false
    /// Deadline of one operation, retries included.
    public var operationTimeoutMs: Int
    /// Deadline of opening one KV connection.
    public var connectTimeoutMs: Int
    /// Period of the background config poll; 0 turns it off.
    public var configPollIntervalMs: Int
    public var retryPolicy: RetryPolicy
    /// Change streams ask for extended attributes (DCP_OPEN INCLUDE_XATTRS): mutations carry their whole value
    /// (XATTR section, then the body, datatype bit 0x04) and deletions the section their tombstone kept. The
    /// gateway with shared bucket access reads its `_sync` attribute this way (docs/adr/0037).
    public var changeStreamIncludesXattrs = false
    /// Key + value bytes a change stream stages across the open snapshots of one node's connection
    /// (`Limits.dcpConsumerMaxStagedBytes`); an item past it closes its vBucket's stream, which reopens from the last
    /// whole snapshot handed out. Tests lower it.
    public var changeStreamMaxStagedBytes = Limits.dcpConsumerMaxStagedBytes
    /// HELLO asks for UnorderedExecution: a durable write waiting for its level answers when done instead of holding
    /// every later request on its connection (responses are matched by opaque already). Off by default because
    /// `settee-router` forwards a vBucket-unaware client's pipeline and must keep its order; the torture harness
    /// turns it on (ADR 0039).
    public var unorderedExecution = false
    /// HELLO asks for Collections (0x12): every document key the client sends carries its collection id as unsigned
    /// LEB128 (`CollectionKey.encodePrefix`; `_default._default` is 0x00), which `collection(_:_:)` handles need for
    /// named collections (ADR 0129). A node that does not agree fails the connection. Off by default because
    /// `forward` sends a router's client's keys as they are, without a prefix.
    public var collections = false
    /// A change stream (`ChangeStream`) of this one collection (its id, `BucketClient.collectionID`) instead of the
    /// default collection: its connections send HELLO Collections and every STREAM_REQ the filter
    /// `{"collections":["<hex id>"]}` (kv_engine's stream-request value, ADR 0138), and the keys it hands out are the
    /// collection's logical keys (the LEB128 prefix removed; a record of another collection, or with a malformed
    /// prefix, is left out). Nil: the default collection only, no HELLO (ADR 0142).
    public var changeStreamCollection: UInt32? = nil
    /// A change stream also hands out batches without events when a vBucket's position moved (a snapshot whose
    /// records were all another collection's, ended by SEQNO_ADVANCED, or purged tombstones), so a consumer waiting
    /// for a position (a backup's end seqno) sees it reached. Off: only batches with events (or `restarted`).
    public var changeStreamReportsProgress = false

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

/// The metadata a with-meta write carries (ADR 0147, kv_engine `docs/Document.md`): the document's CAS (nanoseconds of
/// its origin's hybrid clock; non-zero, below 2^63), revSeqno, flags, expiry (absolute Unix seconds, 0 = never) and
/// datatype (JSON 0x01, XATTR 0x04).
public struct DocumentMeta: Sendable, Equatable {
    public var cas: CAS
    public var revSeqno: RevSeqNo
    public var flags: UInt32
    public var expiry: UInt32
    public var datatype: UInt8

    public init(cas: CAS, revSeqno: RevSeqNo, flags: UInt32 = 0, expiry: UInt32 = 0, datatype: UInt8 = 0) {
        self.cas = cas
        self.revSeqno = revSeqno
        self.flags = flags
        self.expiry = expiry
        self.datatype = datatype
    }
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
