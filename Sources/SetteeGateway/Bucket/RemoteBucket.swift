import Logging
import SetteeClient
import SetteeCore
import SetteeSubdoc
import SetteeTLS
import Synchronization

/// A bucket of a settee (or Couchbase-like) cluster, as the gateway's storage (`"server": "http://host:8091"`):
/// looked up through the admin API, read and written through the smart client (`BucketClient`: vBucket
/// routing, map updates, safe retries), and followed through a DCP change stream (`ChangeStream`) for
/// `mutations()`, which sees writes by anyone (other gateways, SDKs, the CLI) and survives rebalances and
/// failovers.
///
/// The credentials need `bucket_full_access` on the bucket (or the admin role): reads, writes and DCP.
/// Without a username (seed 000's config) nothing is sent: a bucket without a password (`authType=none`)
/// is looked up, read, written and streamed anonymously, as Couchbase 4.x allowed (docs/adr/0015).
public final class RemoteBucket: GatewayBucket {
    public let name: String
    public let url: String
    let client: BucketClient
    /// The collection this bucket reads and writes: `_default._default` for the mounted bucket, a named one for a
    /// view (`collectionView`); every typed operation goes through it.
    let collection: CollectionHandle
    /// Whether `close()` closes `client` (the mounted bucket does; a view shares its client).
    private let ownsClient: Bool
    let options: ClientOptions
    let logger: Logger
    private let streams = Mutex<[UInt64: ChangeStream]>([:])
    private let nextStreamID = Atomic<UInt64>(0)
    private let closed = Atomic<Bool>(false)
    /// Acknowledged writes `_ensure_full_commit` waits for (`GatewayBucket+FullCommit.swift`).
    let fullCommit = Mutex(FullCommitBarrier())

    /// Flags the SDKs give JSON documents (common flags, JSON format), with the JSON datatype.
    static let jsonFlags: UInt32 = 0x0200_0006

    /// Looks the bucket up on the cluster at `url` (an admin port: `http://host:8091`, or a KV port:
    /// `couchbase://host[:11210]`) and connects to every node of its map. Fails with `.failed` and a message
    /// naming the cause: unknown bucket, wrong credentials, unreachable cluster, or another kind of URL.
    /// `https://` and `couchbases://` reach the cluster over TLS (the smart client and the change stream
    /// both), verified by `caCertPath` (the database's `cacertpath`), which they require. The change stream
    /// carries extended attributes (DCP INCLUDE_XATTRS): `_sync` for shared bucket access, and the purge marker a
    /// deletion's tombstone kept for every database (`BucketMutation.purged`, ADR 0074). `collections`: the clients say
    /// HELLO Collections, as `collectionView` needs (a database serving named collections, ADR 0142).
    public init(
        url: String, bucket: String, username: String?, password: String?, caCertPath: String? = nil,
        collections: Bool = false, logger: Logger = Logger(label: "settee.gateway.bucket")
    ) async throws(GatewayBucketError) {
        // `http://host:8091`: the admin API (bucket lookup); `couchbase://host`: a KV port (GET_CLUSTER_CONFIG).
        let schemes = ["http://", "couchbase://", "https://", "couchbases://"]
        guard schemes.contains(where: { url.hasPrefix($0) }), let seed = Seed(url) else {
            throw .failed("server \(url) is not an http(s)://host:port admin URL (or couchbase(s)://host)")
        }
        var options = ClientOptions(
            seeds: [seed], bucket: bucket, username: username, password: password,
            operationTimeoutMs: Limits.gatewayRemoteOperationTimeoutMs)
        options.changeStreamIncludesXattrs = true
        // HELLO Collections on every KV connection when a database serves named collections (`collectionView`).
        options.collections = collections
        do { options.tls = try TLSTrust.forSeeds([url], caFile: caCertPath, pin: nil) } catch {
            throw .failed("server \(url): \(error) (set the database's cacertpath)")
        }
        let client: BucketClient
        do {
            client = try await BucketClient.connect(options, logger: logger)
        } catch let e as ClientError {
            throw Self.bootstrapError(e, url: url, bucket: bucket, username: username)
        } catch {
            throw .failed("cannot reach the cluster at \(url): \(error)")
        }
        // The change stream is opened now, so a user without the right to stream (DCP) fails the mount with a
        // clear message instead of a gateway that never sees other writers; the first `mutations()` uses it.
        let stream: ChangeStream
        do {
            stream = try await ChangeStream.open(options, logger: logger)
        } catch let e as ClientError {
            await client.close()
            throw Self.bootstrapError(e, url: url, bucket: bucket, username: username)
        } catch {
            await client.close()
            throw .failed("cannot stream bucket \(bucket) at \(url): \(error)")
        }
        self.name = bucket
        self.url = url
        self.client = client
        self.collection = client.collection(CollectionsManifest.defaultName, CollectionsManifest.defaultName)
        self.ownsClient = true
        self.options = options
        self.logger = logger
        self.prepared = Mutex(stream)
    }

    private init(view parent: RemoteBucket, collection: CollectionHandle, options: ClientOptions) {
        self.name = parent.name
        self.url = parent.url
        self.client = parent.client
        self.collection = collection
        self.ownsClient = false
        self.options = options
        self.logger = parent.logger
        self.prepared = Mutex(nil)
    }

    /// The named collection `scope.name` of this bucket as a bucket of its own (a keyspace of a gateway database,
    /// ADR 0142): its operations go through a `CollectionHandle` on this bucket's client (which must have been opened
    /// with `collections`), its `mutations()` through a change stream filtered to the collection
    /// (`ClientOptions.changeStreamCollection`). The collection's id is resolved now: `.failed` naming it when the
    /// bucket has no such collection. Closing the view closes its streams, not the shared client.
    public func collectionView(scope: String, name: String) async throws(GatewayBucketError) -> RemoteBucket {
        let id: UInt32
        do { id = try await client.collectionID(scope: scope, collection: name) } catch {
            throw .failed("bucket \(self.name) has no collection \(scope).\(name) (\(error))")
        }
        var options = self.options
        options.changeStreamCollection = id
        return RemoteBucket(view: self, collection: client.collection(scope, name), options: options)
    }

    /// The change stream opened by `init`, until the first `mutations()` takes it.
    private let prepared: Mutex<ChangeStream?>

    func takePreparedStream() -> ChangeStream? {
        prepared.withLock { s in
            let out = s
            s = nil
            return out
        }
    }

    static func bootstrapError(_ e: ClientError, url: String, bucket: String, username: String?)
        -> GatewayBucketError
    {
        switch e {
        case .authenticationFailed:
            guard let username else {
                // Say what to change: the bucket's access control, or the config's credentials.
                return .failed(
                    "the cluster at \(url) refused bucket \(bucket) without credentials: the bucket has a password "
                        + "(or does not exist). Either create it without one (console: Access control \"No password\"; "
                        + "REST: authType=none) or add \"username\" and \"password\" of a user allowed on bucket "
                        + "\(bucket) to this database's config")
            }
            return .failed("the cluster at \(url) refused username \(username) (wrong username or password)")
        case .bucketNotFound:
            return .failed("the cluster at \(url) has no bucket named \(bucket) (or the user may not access it)")
        case .accessDenied(let m):
            return .failed("user \(username ?? "(none)") may not stream bucket \(bucket): \(m)")
        case .bootstrapFailed(let m):
            return .failed("cannot reach the cluster at \(url): \(m)")
        default:
            return .failed("cannot mount bucket \(bucket) at \(url): \(e)")
        }
    }

    /// How a client error reads to the gateway.
    static func map(_ error: any Error) -> GatewayBucketError {
        guard let e = error as? ClientError else { return .failed("\(error)") }
        switch e {
        case .keyNotFound, .notStored: return .notFound
        case .keyExists, .casMismatch: return .exists
        case .valueTooLarge: return .tooBig
        case .timeout, .temporaryFailure, .noActiveNode, .outOfMemory, .syncWriteInProgress, .locked, .closed,
            .ambiguous, .durabilityAmbiguous:
            return .temporary(e.description)
        default: return .failed(e.description)
        }
    }

    private static func looksLikeJSON(_ value: [UInt8]) -> Bool {
        guard let first = value.first(where: { $0 != 0x20 && $0 != 0x0a && $0 != 0x0d && $0 != 0x09 }) else {
            return false
        }
        return first == UInt8(ascii: "{") || first == UInt8(ascii: "[")
    }

    private static func format(_ value: [UInt8]) -> (flags: UInt32, datatype: UInt8) {
        looksLikeJSON(value) ? (jsonFlags, Datatype.json.rawValue) : (0, 0)
    }

    public func get(_ key: String) async throws(GatewayBucketError) -> BucketItem? {
        do {
            let r = try await collection.get(key)
            return BucketItem(value: r.value, cas: r.cas)
        } catch ClientError.keyNotFound {
            return nil
        } catch {
            throw Self.map(error)
        }
    }

    public func insert(_ key: String, value: [UInt8], expiry: UInt32) async throws(GatewayBucketError) -> CAS {
        let f = Self.format(value)
        do {
            return noted(try await collection.insert(key, value, flags: f.flags, expiry: expiry, datatype: f.datatype))
        } catch { throw Self.map(error) }
    }

    public func replace(_ key: String, value: [UInt8], cas: CAS, expiry: UInt32) async throws(GatewayBucketError)
        -> CAS
    {
        let f = Self.format(value)
        do {
            return noted(
                try await collection.replace(key, value, flags: f.flags, expiry: expiry, cas: cas, datatype: f.datatype)
            )
        } catch { throw Self.map(error) }
    }

    public func upsert(_ key: String, value: [UInt8], expiry: UInt32) async throws(GatewayBucketError) -> CAS {
        let f = Self.format(value)
        do {
            return noted(try await collection.upsert(key, value, flags: f.flags, expiry: expiry, datatype: f.datatype))
        } catch { throw Self.map(error) }
    }

    public func touch(_ key: String, expiry: UInt32) async throws(GatewayBucketError) {
        do { note(try await collection.touch(key, expiry: expiry).token) } catch { throw Self.map(error) }
    }

    @discardableResult public func remove(_ key: String, cas: CAS) async throws(GatewayBucketError) -> CAS {
        do { return noted(try await collection.remove(key, cas: cas)) } catch { throw Self.map(error) }
    }

    public func lookupIn(_ key: String, _ request: SubdocRequest) async throws(GatewayBucketError) -> LookupInResult? {
        do { return try await collection.lookupIn(key, request) } catch { throw Self.map(error) }
    }

    public func mutateIn(_ key: String, _ request: SubdocRequest, cas: CAS) async throws(GatewayBucketError) -> CAS {
        do { return noted(try await collection.mutateIn(key, request, cas: cas)) } catch { throw Self.map(error) }
    }

    public func increment(_ key: String, delta: UInt64, initial: UInt64) async throws(GatewayBucketError) -> UInt64 {
        do {
            // The counter's initial value is stored as is; `delta` applies only to an existing counter.
            let r = try await collection.increment(key, delta: delta, initial: initial)
            note(r.token)
            return r.value
        } catch { throw Self.map(error) }
    }

    /// A change stream from seqno 0 on every vBucket: every item, then every later mutation. Pull-driven: the
    /// stream reads the next snapshot from the cluster only as the consumer takes mutations (DCP flow
    /// control), so a slow consumer holds the producers back instead of being dropped. A stream that cannot
    /// be opened (cluster unreachable) is retried until it can, or until `close()`.
    public func mutations() -> AsyncStream<BucketMutation> {
        let id = nextStreamID.wrappingAdd(1, ordering: .relaxed).oldValue
        let reader = MutationReader(bucket: self, id: id)
        return AsyncStream(unfolding: { await reader.next() }, onCancel: { reader.cancel() })
    }

    func register(_ stream: ChangeStream, id: UInt64) -> Bool {
        streams.withLock { s in
            guard !closed.load(ordering: .acquiring) else { return false }
            s[id] = stream
            return true
        }
    }

    func unregister(_ id: UInt64) -> ChangeStream? {
        streams.withLock { $0.removeValue(forKey: id) }
    }

    var isClosed: Bool { closed.load(ordering: .acquiring) }

    public func close() async {
        if let unused = takePreparedStream() { await unused.close() }
        let all = streams.withLock { s -> [ChangeStream] in
            closed.store(true, ordering: .releasing)
            let out = Array(s.values)
            s = [:]
            return out
        }
        for s in all { await s.close() }
        if ownsClient { await client.close() }
    }
}

/// Pulls one `ChangeStream`'s batches and hands their events out one by one as `BucketMutation`s. Used by a
/// single consumer (an `AsyncStream(unfolding:)`), so its mutable state needs no lock beyond `stream`.
final class MutationReader: @unchecked Sendable {
    let bucket: RemoteBucket
    let id: UInt64
    private var stream: ChangeStream?
    private var iterator: ChangeStream.Batches.AsyncIterator?
    private var buffer: [ChangeEvent] = []
    private var index = 0
    private let cancelled = Atomic<Bool>(false)

    init(bucket: RemoteBucket, id: UInt64) {
        self.bucket = bucket
        self.id = id
    }

    func next() async -> BucketMutation? {
        while true {
            if index < buffer.count {
                let e = buffer[index]
                index += 1
                // A stream without HELLO Collections carries the default collection's records only, with logical
                // keys (ADR 0138); a key starting with 0xff is then a binary default key, which no UTF-8 document ID
                // can name. The check also keeps a producer from before ADR 0138 (which sent engine keys) from
                // leaking. A collection view's stream hands out its collection's logical keys (ADR 0142).
                if e.key.first == CollectionKey.engineMarker { continue }
                // With INCLUDE_XATTRS values carry their XATTR section, and a deletion the one its tombstone kept.
                let (body, sync, purged) = BucketMutation.split(
                    e.value, hasXattrs: e.datatype & Datatype.xattr.rawValue != 0)
                return BucketMutation(
                    key: String(decoding: e.key, as: UTF8.self), value: e.kind == .mutation ? body : [], cas: e.cas,
                    deleted: e.kind != .mutation, vbucket: e.vbucket, seqno: e.seqno, syncXattr: sync,
                    purged: purged)
            }
            buffer = []
            index = 0
            guard !cancelled.load(ordering: .acquiring), !bucket.isClosed, !Task.isCancelled else {
                await finish()
                return nil
            }
            if iterator == nil {
                do {
                    let s: ChangeStream
                    if let ready = bucket.takePreparedStream() {
                        s = ready
                    } else {
                        s = try await ChangeStream.open(bucket.options, logger: bucket.logger)
                    }
                    guard bucket.register(s, id: id) else {
                        await s.close()
                        return nil
                    }
                    stream = s
                    iterator = s.batches.makeAsyncIterator()
                } catch {
                    bucket.logger.warning(
                        "cannot open the bucket's change stream; retrying",
                        metadata: ["bucket": "\(bucket.name)", "error": "\(error)"])
                    try? await Task.sleep(for: .seconds(1))
                    continue
                }
            }
            guard let batch = await iterator?.next() else {
                await finish()
                return nil
            }
            buffer = batch.events
            if batch.restarted || batch.branched, let count = stream?.vbucketCount {
                // Handed out before the vBucket's changes are read again, or before its new history goes on: what
                // the gateway indexed of it may be gone (ADR 0096, 0098).
                return .restart(batch.vbucket, vbucketCount: count, branched: !batch.restarted)
            }
        }
    }

    func cancel() {
        cancelled.store(true, ordering: .releasing)
        if let s = bucket.unregister(id) {
            Task { await s.close() }
        }
    }

    private func finish() async {
        if let s = bucket.unregister(id) { await s.close() }
    }
}
