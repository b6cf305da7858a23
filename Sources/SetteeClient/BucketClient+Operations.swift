import NIOCore
import SetteeCore
import SetteeProtocol

/// The typed key-value API. Each call is one routed operation with the client's deadline, on the default collection
/// (`_default._default`); `collection(_:_:)` gives the same operations on a named collection.
extension BucketClient {
    public func get(_ key: String) async throws -> GetResult {
        try await get(key, collection: CollectionsManifest.defaultCollectionID)
    }

    /// Creates or replaces the document.
    public func upsert(
        _ key: String, _ value: [UInt8], flags: UInt32 = 0, expiry: UInt32 = 0, datatype: UInt8 = 0,
        durability: DurabilityLevel? = nil
    ) async throws -> MutationResult {
        try await store(
            .set, key, collection: CollectionsManifest.defaultCollectionID, value, flags: flags, expiry: expiry,
            cas: .zero, datatype: datatype, durability: durability)
    }

    /// Creates the document; fails `.keyExists` when it exists.
    public func insert(
        _ key: String, _ value: [UInt8], flags: UInt32 = 0, expiry: UInt32 = 0, datatype: UInt8 = 0,
        durability: DurabilityLevel? = nil
    ) async throws -> MutationResult {
        try await store(
            .add, key, collection: CollectionsManifest.defaultCollectionID, value, flags: flags, expiry: expiry,
            cas: .zero, datatype: datatype, durability: durability)
    }

    /// Replaces an existing document; with a non-zero `cas`, only if it still has that CAS.
    public func replace(
        _ key: String, _ value: [UInt8], flags: UInt32 = 0, expiry: UInt32 = 0, cas: CAS = .zero, datatype: UInt8 = 0,
        durability: DurabilityLevel? = nil
    ) async throws -> MutationResult {
        try await store(
            .replace, key, collection: CollectionsManifest.defaultCollectionID, value, flags: flags, expiry: expiry,
            cas: cas, datatype: datatype, durability: durability)
    }

    public func remove(_ key: String, cas: CAS = .zero, durability: DurabilityLevel? = nil) async throws
        -> MutationResult
    {
        try await remove(key, collection: CollectionsManifest.defaultCollectionID, cas: cas, durability: durability)
    }

    /// Sets a new expiry without changing the value.
    public func touch(_ key: String, expiry: UInt32) async throws -> MutationResult {
        try await touch(key, collection: CollectionsManifest.defaultCollectionID, expiry: expiry)
    }

    /// Adds `delta`; creates the counter with `initial` when missing (fails `.keyNotFound` if `initial` is nil).
    /// With `durability`, the new value is acknowledged only once the level is met, as for stores.
    public func increment(
        _ key: String, delta: UInt64 = 1, initial: UInt64? = nil, expiry: UInt32 = 0,
        durability: DurabilityLevel? = nil
    ) async throws -> CounterResult {
        try await counter(
            .increment, key, collection: CollectionsManifest.defaultCollectionID, delta: delta, initial: initial,
            expiry: expiry, durability: durability)
    }

    /// Subtracts `delta`, stopping at 0.
    public func decrement(_ key: String, delta: UInt64 = 1, initial: UInt64? = nil, expiry: UInt32 = 0) async throws
        -> CounterResult
    {
        try await counter(
            .decrement, key, collection: CollectionsManifest.defaultCollectionID, delta: delta, initial: initial,
            expiry: expiry)
    }

    public func append(_ key: String, _ value: [UInt8], cas: CAS = .zero) async throws -> MutationResult {
        try await concat(.append, key, value, cas: cas)
    }

    public func prepend(_ key: String, _ value: [UInt8], cas: CAS = .zero) async throws -> MutationResult {
        try await concat(.prepend, key, value, cas: cas)
    }

    // MARK: operations in a collection (by id)

    func get(_ key: String, collection: UInt32) async throws -> GetResult {
        try await get(try operationKey(key, collection: collection))
    }

    /// GET of a key given as bytes (a key stored by a client that did not send UTF-8: restore, ADR 0147).
    func get(keyBytes key: [UInt8], collection: UInt32) async throws -> GetResult {
        try await get(try operationKey(bytes: key, collection: collection))
    }

    /// GET_META (0xa0) of a key given as bytes: its CAS, revSeqno, flags and expiry, and whether it is a tombstone;
    /// nil when the key has neither a document nor a tombstone. Throws `server(status:message:)` for a response
    /// whose extras are not the 20 bytes GET_META answers.
    func getMeta(keyBytes key: [UInt8], collection: UInt32) async throws -> (meta: DocumentMeta, deleted: Bool)? {
        let k = try operationKey(bytes: key, collection: collection)
        let r = try await execute(RequestFrame(opcode: .getMeta, key: k.wire), key: k.route, operation: "getMeta")
        if r.status == .keyNotFound { return nil }
        try check(r, .getMeta)
        var extras = r.extras
        guard let deleted: UInt32 = extras.readInteger(), let flags: UInt32 = extras.readInteger(),
            let expiry: UInt32 = extras.readInteger(), let revSeqno: UInt64 = extras.readInteger()
        else { throw ClientError.server(status: r.status.rawValue, message: "GET_META answer without its extras") }
        return (
            DocumentMeta(cas: CAS(r.cas), revSeqno: RevSeqNo(revSeqno), flags: flags, expiry: expiry), deleted != 0
        )
    }

    private func get(_ k: OperationKey) async throws -> GetResult {
        let r = try await execute(RequestFrame(opcode: .get, key: k.wire), key: k.route, operation: "get")
        try check(r, .get)
        return GetResult(
            value: Array(r.value.readableBytesView), flags: r.extras.getInteger(at: r.extras.readerIndex) ?? 0,
            cas: CAS(r.cas), datatype: r.datatype)
    }

    func remove(_ key: String, collection: UInt32, cas: CAS, durability: DurabilityLevel?) async throws
        -> MutationResult
    {
        let k = try operationKey(key, collection: collection)
        let req = RequestFrame(opcode: .delete, cas: cas.rawValue, framingExtras: framing(durability), key: k.wire)
        let r = try await execute(req, key: k.route, operation: "remove")
        try check(r, .delete)
        return mutationResult(r, key: k.route)
    }

    func touch(_ key: String, collection: UInt32, expiry: UInt32) async throws -> MutationResult {
        let k = try operationKey(key, collection: collection)
        var extras = ByteBuffer()
        extras.writeInteger(expiry)
        let r = try await execute(
            RequestFrame(opcode: .touch, extras: extras, key: k.wire), key: k.route, operation: "touch")
        try check(r, .touch)
        return mutationResult(r, key: k.route)
    }

    // MARK: helpers

    /// A key as one operation sends it (`wire`) and routes it (`route`, the logical key the vBucket hashes).
    struct OperationKey {
        var wire: ByteBuffer
        var route: ByteBuffer
    }

    /// `key` in collection `collection` (an id from `collectionID`, 0 for `_default._default`): with
    /// `ClientOptions.collections` the wire key is `LEB128(id) ‖ key`, without it the key itself (only the default
    /// collection is reachable then). Throws `invalidArguments` for an empty key, one past `Limits.maxKeyLength`
    /// (a named collection's: past `CollectionKey.maxLogicalKeyLength`, kv_engine's 246), or a named collection on
    /// a client without Collections.
    func operationKey(_ key: String, collection: UInt32) throws -> OperationKey {
        try operationKey(length: key.utf8.count, collection: collection) { $0.writeString(key) }
    }

    /// `operationKey` for a key given as bytes, which need not be UTF-8 (the memcached protocol's keys are bytes).
    func operationKey(bytes key: [UInt8], collection: UInt32) throws -> OperationKey {
        try operationKey(length: key.count, collection: collection) { $0.writeBytes(key) }
    }

    /// The key of `n` bytes that `write` appends, checked and prefixed as `operationKey` says.
    private func operationKey(length n: Int, collection: UInt32, write: (inout ByteBuffer) -> Void) throws
        -> OperationKey
    {
        let max =
            collection == CollectionsManifest.defaultCollectionID
            ? Limits.maxKeyLength : CollectionKey.maxLogicalKeyLength(collection: collection)
        guard n > 0, n <= max else { throw ClientError.invalidArguments("key length \(n) not in 1...\(max)") }
        guard options.collections else {
            guard collection == CollectionsManifest.defaultCollectionID else {
                throw ClientError.invalidArguments(
                    "a named collection needs HELLO Collections: set ClientOptions.collections")
            }
            var route = ByteBufferAllocator().buffer(capacity: n)
            write(&route)
            return OperationKey(wire: route, route: route)
        }
        // One buffer of the exact size, the prefix written into it, and the route a slice of it: one allocation per
        // operation, as without Collections (no array, no second buffer for the route).
        let prefix = CollectionKey.prefixLength(collection)
        var wire = ByteBufferAllocator().buffer(capacity: prefix + n)
        CollectionKey.forEachPrefixByte(collection) { wire.writeInteger($0) }
        write(&wire)
        guard let route = wire.getSlice(at: wire.readerIndex + prefix, length: n) else {
            var route = ByteBufferAllocator().buffer(capacity: n)
            write(&route)
            return OperationKey(wire: wire, route: route)
        }
        return OperationKey(wire: wire, route: route)
    }

    /// The durability frame: the level, and a timeout within which the server answers (ambiguous at worst) before
    /// this client gives up on the operation: 90% of `operationTimeoutMs`, in 1...65,534 ms (65,535 is "none" to
    /// kv_engine). Without one the server waited its default 30 s, and on a connection that answers in order every
    /// later answer waited behind a write the client had already given up on (ADR 0118).
    func framing(_ durability: DurabilityLevel?) -> ByteBuffer {
        guard let durability else { return ByteBuffer() }
        let ms = options.operationTimeoutMs - options.operationTimeoutMs / 10
        return ByteBuffer(
            bytes: FrameInfoParser.durability(durability, timeoutMs: UInt16(clamping: max(1, min(65_534, ms)))))
    }

    func check(_ r: Frame, _ opcode: Opcode) throws {
        if let e = ClientError.from(status: r.status, opcode: opcode, message: String(buffer: r.value)) { throw e }
    }

    private func token(_ r: Frame, vbucket: UInt16) -> MutationToken? {
        guard r.extras.readableBytes >= 16, let uuid: UInt64 = r.extras.getInteger(at: r.extras.readerIndex),
            let seqno: UInt64 = r.extras.getInteger(at: r.extras.readerIndex + 8)
        else { return nil }
        return MutationToken(vbucket: VBucketID(vbucket), vbucketUUID: VBucketUUID(uuid), seqno: SeqNo(seqno))
    }

    private func mutationResult(_ r: Frame, key: ByteBuffer? = nil) -> MutationResult {
        let vb = key.map { currentConfig?.vbucket(forKey: $0.readableBytesView).rawValue ?? 0 } ?? 0
        return MutationResult(cas: CAS(r.cas), token: token(r, vbucket: vb))
    }

    func store(
        _ opcode: Opcode, _ key: String, collection: UInt32, _ value: [UInt8], flags: UInt32, expiry: UInt32, cas: CAS,
        datatype: UInt8, durability: DurabilityLevel?
    ) async throws -> MutationResult {
        let k = try operationKey(key, collection: collection)
        guard value.count <= Limits.maxValueSize else { throw ClientError.valueTooLarge }
        var extras = ByteBuffer()
        extras.writeInteger(flags)
        extras.writeInteger(expiry)
        let req = RequestFrame(
            opcode: opcode, cas: cas.rawValue, datatype: datatype, framingExtras: framing(durability), extras: extras,
            key: k.wire, value: ByteBuffer(bytes: value))
        let name = opcode == .set ? "upsert" : opcode == .add ? "insert" : "replace"
        let r = try await execute(req, key: k.route, operation: name)
        try check(r, opcode)
        return mutationResult(r, key: k.route)
    }

    /// SET_WITH_META / ADD_WITH_META / DEL_WITH_META (ADR 0147): stores `meta`'s version of `key` keeping its CAS and
    /// revSeqno. Conflict loss or a live document for ADD is `ClientError.keyExists` (a wrong `guardCAS`:
    /// `casMismatch`).
    func withMeta(
        _ opcode: Opcode, keyBytes key: [UInt8], collection: UInt32, _ value: [UInt8], meta: DocumentMeta,
        guardCAS: CAS, skipConflictResolution: Bool
    ) async throws -> MutationResult {
        let k = try operationKey(bytes: key, collection: collection)
        guard value.count <= Limits.maxValueSize else { throw ClientError.valueTooLarge }
        var extras = ByteBuffer()
        WithMetaRequest(
            flags: meta.flags, expiry: meta.expiry, revSeqno: meta.revSeqno.rawValue, cas: meta.cas.rawValue,
            options: skipConflictResolution ? [.skipConflictResolution] : []
        ).encode(into: &extras)
        let req = RequestFrame(
            opcode: opcode, cas: guardCAS.rawValue, datatype: meta.datatype, extras: extras, key: k.wire,
            value: ByteBuffer(bytes: value))
        let name = opcode == .delWithMeta ? "deleteWithMeta" : opcode == .addWithMeta ? "addWithMeta" : "setWithMeta"
        let r = try await execute(req, key: k.route, operation: name)
        // Without a guard CAS, KEY_EEXISTS is a conflict loss (or ADD's live document), not a CAS mismatch.
        if r.status == .keyExists && guardCAS.isZero { throw ClientError.keyExists }
        try check(r, opcode)
        return mutationResult(r, key: k.route)
    }

    func counter(
        _ opcode: Opcode, _ key: String, collection: UInt32, delta: UInt64, initial: UInt64?, expiry: UInt32,
        durability: DurabilityLevel? = nil
    ) async throws -> CounterResult {
        let k = try operationKey(key, collection: collection)
        var extras = ByteBuffer()
        extras.writeInteger(delta)
        extras.writeInteger(initial ?? 0)
        extras.writeInteger(initial == nil ? UInt32.max : expiry)
        let r = try await execute(
            RequestFrame(opcode: opcode, framingExtras: framing(durability), extras: extras, key: k.wire),
            key: k.route, operation: opcode == .increment ? "increment" : "decrement")
        try check(r, opcode)
        let m = mutationResult(r, key: k.route)
        return CounterResult(value: r.value.getInteger(at: r.value.readerIndex) ?? 0, cas: m.cas, token: m.token)
    }

    private func concat(_ opcode: Opcode, _ key: String, _ value: [UInt8], cas: CAS) async throws -> MutationResult {
        let k = try operationKey(key, collection: CollectionsManifest.defaultCollectionID)
        let r = try await execute(
            RequestFrame(opcode: opcode, cas: cas.rawValue, key: k.wire, value: ByteBuffer(bytes: value)),
            key: k.route, operation: opcode == .append ? "append" : "prepend")
        try check(r, opcode)
        return mutationResult(r, key: k.route)
    }
}
