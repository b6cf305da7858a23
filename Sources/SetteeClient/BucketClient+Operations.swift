import NIOCore
import SetteeCore
import SetteeProtocol

/// The typed key-value API. Each call is one routed operation with the client's deadline.
extension BucketClient {
    public func get(_ key: String) async throws -> GetResult {
        let k = try keyBuffer(key)
        let r = try await execute(RequestFrame(opcode: .get, key: k), key: k, operation: "get")
        try check(r, .get)
        return GetResult(
            value: Array(r.value.readableBytesView), flags: r.extras.getInteger(at: r.extras.readerIndex) ?? 0,
            cas: CAS(r.cas), datatype: r.datatype)
    }

    /// Creates or replaces the document.
    public func upsert(
        _ key: String, _ value: [UInt8], flags: UInt32 = 0, expiry: UInt32 = 0, datatype: UInt8 = 0,
        durability: DurabilityLevel? = nil
    ) async throws -> MutationResult {
        try await store(
            .set, key, value, flags: flags, expiry: expiry, cas: .zero, datatype: datatype, durability: durability)
    }

    /// Creates the document; fails `.keyExists` when it exists.
    public func insert(
        _ key: String, _ value: [UInt8], flags: UInt32 = 0, expiry: UInt32 = 0, datatype: UInt8 = 0,
        durability: DurabilityLevel? = nil
    ) async throws -> MutationResult {
        try await store(
            .add, key, value, flags: flags, expiry: expiry, cas: .zero, datatype: datatype, durability: durability)
    }

    /// Replaces an existing document; with a non-zero `cas`, only if it still has that CAS.
    public func replace(
        _ key: String, _ value: [UInt8], flags: UInt32 = 0, expiry: UInt32 = 0, cas: CAS = .zero, datatype: UInt8 = 0,
        durability: DurabilityLevel? = nil
    ) async throws -> MutationResult {
        try await store(
            .replace, key, value, flags: flags, expiry: expiry, cas: cas, datatype: datatype, durability: durability)
    }

    public func remove(_ key: String, cas: CAS = .zero, durability: DurabilityLevel? = nil) async throws
        -> MutationResult
    {
        let k = try keyBuffer(key)
        let req = RequestFrame(opcode: .delete, cas: cas.rawValue, framingExtras: framing(durability), key: k)
        let r = try await execute(req, key: k, operation: "remove")
        try check(r, .delete)
        return mutationResult(r, key: k)
    }

    /// Sets a new expiry without changing the value.
    public func touch(_ key: String, expiry: UInt32) async throws -> MutationResult {
        let k = try keyBuffer(key)
        var extras = ByteBuffer()
        extras.writeInteger(expiry)
        let r = try await execute(RequestFrame(opcode: .touch, extras: extras, key: k), key: k, operation: "touch")
        try check(r, .touch)
        return mutationResult(r, key: k)
    }

    /// Adds `delta`; creates the counter with `initial` when missing (fails `.keyNotFound` if `initial` is nil).
    /// With `durability`, the new value is acknowledged only once the level is met, as for stores.
    public func increment(
        _ key: String, delta: UInt64 = 1, initial: UInt64? = nil, expiry: UInt32 = 0,
        durability: DurabilityLevel? = nil
    ) async throws -> CounterResult {
        try await counter(.increment, key, delta: delta, initial: initial, expiry: expiry, durability: durability)
    }

    /// Subtracts `delta`, stopping at 0.
    public func decrement(_ key: String, delta: UInt64 = 1, initial: UInt64? = nil, expiry: UInt32 = 0) async throws
        -> CounterResult
    {
        try await counter(.decrement, key, delta: delta, initial: initial, expiry: expiry)
    }

    public func append(_ key: String, _ value: [UInt8], cas: CAS = .zero) async throws -> MutationResult {
        try await concat(.append, key, value, cas: cas)
    }

    public func prepend(_ key: String, _ value: [UInt8], cas: CAS = .zero) async throws -> MutationResult {
        try await concat(.prepend, key, value, cas: cas)
    }

    // MARK: helpers

    private func keyBuffer(_ key: String) throws -> ByteBuffer {
        let n = key.utf8.count
        guard n > 0, n <= Limits.maxKeyLength else {
            throw ClientError.invalidArguments("key length \(n) not in 1...\(Limits.maxKeyLength)")
        }
        return ByteBuffer(string: key)
    }

    /// The durability frame: the level, and a timeout within which the server answers (ambiguous at worst) before
    /// this client gives up on the operation: 90% of `operationTimeoutMs`, in 1...65,534 ms (65,535 is "none" to
    /// kv_engine). Without one the server waited its default 30 s, and on a connection that answers in order every
    /// later answer waited behind a write the client had already given up on (ADR 0118).
    private func framing(_ durability: DurabilityLevel?) -> ByteBuffer {
        guard let durability else { return ByteBuffer() }
        let ms = options.operationTimeoutMs - options.operationTimeoutMs / 10
        return ByteBuffer(
            bytes: FrameInfoParser.durability(durability, timeoutMs: UInt16(clamping: max(1, min(65_534, ms)))))
    }

    private func check(_ r: Frame, _ opcode: Opcode) throws {
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

    private func store(
        _ opcode: Opcode, _ key: String, _ value: [UInt8], flags: UInt32, expiry: UInt32, cas: CAS, datatype: UInt8,
        durability: DurabilityLevel?
    ) async throws -> MutationResult {
        let k = try keyBuffer(key)
        guard value.count <= Limits.maxValueSize else { throw ClientError.valueTooLarge }
        var extras = ByteBuffer()
        extras.writeInteger(flags)
        extras.writeInteger(expiry)
        let req = RequestFrame(
            opcode: opcode, cas: cas.rawValue, datatype: datatype, framingExtras: framing(durability), extras: extras,
            key: k, value: ByteBuffer(bytes: value))
        let name = opcode == .set ? "upsert" : opcode == .add ? "insert" : "replace"
        let r = try await execute(req, key: k, operation: name)
        try check(r, opcode)
        return mutationResult(r, key: k)
    }

    private func counter(
        _ opcode: Opcode, _ key: String, delta: UInt64, initial: UInt64?, expiry: UInt32,
        durability: DurabilityLevel? = nil
    ) async throws -> CounterResult {
        let k = try keyBuffer(key)
        var extras = ByteBuffer()
        extras.writeInteger(delta)
        extras.writeInteger(initial ?? 0)
        extras.writeInteger(initial == nil ? UInt32.max : expiry)
        let r = try await execute(
            RequestFrame(opcode: opcode, framingExtras: framing(durability), extras: extras, key: k), key: k,
            operation: opcode == .increment ? "increment" : "decrement")
        try check(r, opcode)
        let m = mutationResult(r, key: k)
        return CounterResult(value: r.value.getInteger(at: r.value.readerIndex) ?? 0, cas: m.cas, token: m.token)
    }

    private func concat(_ opcode: Opcode, _ key: String, _ value: [UInt8], cas: CAS) async throws -> MutationResult {
        let k = try keyBuffer(key)
        let r = try await execute(
            RequestFrame(opcode: opcode, cas: cas.rawValue, key: k, value: ByteBuffer(bytes: value)), key: k,
            operation: opcode == .append ? "append" : "prepend")
        try check(r, opcode)
        return mutationResult(r, key: k)
    }
}
