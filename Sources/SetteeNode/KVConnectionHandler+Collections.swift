import NIOCore
import SetteeAuth
import SetteeCore
import SetteeProtocol
import SetteeRegistry

/// Collections on the KV port (ADR 0129, kv_engine `docs/Collections.md`). With HELLO Collections (0x12) every
/// document key starts with its collection id (unsigned LEB128); without it a connection reaches
/// `_default._default` only. The engine's key space separates collections: a default-collection key is stored as
/// itself, a named collection's as `CollectionKey.engineKey` (marker ‖ LEB128 id ‖ logical key), so every data
/// command (sub-document, durability, observe, locks) works per collection on the rewritten key.
extension KVConnectionHandler {
    /// Rewrites a collection-aware request's key into its engine key, in place: the default collection's prefix (one
    /// byte, 0x00) is stripped without a copy; a named collection's key is copied behind the marker. Answers (and
    /// returns false) for a malformed prefix (EINVAL), an id the bucket's manifest does not have
    /// (UNKNOWN_COLLECTION with the manifest uid), or a logical key past `CollectionKey.maxLogicalKeyLength`.
    /// Without a bucket the frame goes on unchanged: its handler answers NO_BUCKET.
    func inCollection(_ frame: inout Frame) -> Bool {
        guard let (id, length) = CollectionKey.decodePrefix(frame.key.readableBytesView) else {
            refuseInvalid(frame)
            return false
        }
        if id == CollectionsManifest.defaultCollectionID {
            frame.key.moveReaderIndex(forwardBy: length)
            if frame.key.readableBytesView.first == CollectionKey.engineMarker {
                return escapeDefaultKey(&frame)
            }
            return true
        }
        // The collection this connection last used, while the registry is unchanged: a request to it skips the
        // bucket and manifest lookups (a connection works in one collection at a time, as SDKs' do).
        if let last = lastCollection, last.id == id, last.generation == node.registry.generation {
            return setEngineKey(of: &frame, id: id, length: length)
        }
        guard case .ok(let bucket) = currentBucket() else { return true }
        guard bucket.collectionsByID[id] != nil else {
            emit {
                $0.writeResponse(
                    opcode: frame.opcode, status: .unknownCollection, opaque: frame.opaque, datatype: 1,
                    value: bucket.manifest.unknownBody)
            }
            return false
        }
        lastCollection = (bucket.generation, id)
        return setEngineKey(of: &frame, id: id, length: length)
    }

    /// Replaces `frame`'s key with the engine key of named collection `id` (`length`: the wire key's LEB128 prefix
    /// bytes, already checked); false (answered EINVAL) for an empty or too long logical key. The engine key is the
    /// marker and the wire key as it came (`CollectionKey.engineKey`'s layout), unless the client padded its LEB128
    /// prefix: no intermediate arrays (issue 70's bench row measured the named collection at 0.82 of the default one
    /// while this built three arrays per request), written in one copy into the connection's reused
    /// `engineKeyBuffer`, not a new buffer per request (ADR 0143, session 61). `warmLookups` warms the same key.
    private func setEngineKey(of frame: inout Frame, id: UInt32, length: Int) -> Bool {
        let wire = frame.key.readableBytesView
        let logical = wire.dropFirst(length)
        guard !logical.isEmpty, logical.count <= CollectionKey.maxLogicalKeyLength(collection: id) else {
            refuseInvalid(frame)
            return false
        }
        Self.writeEngineKey(into: &engineKeyBuffer, id: id, wire: wire, prefixLength: length)
        frame.key = engineKeyBuffer
        return true
    }

    /// Writes named collection `id`'s engine key for `wire` (a wire key whose LEB128 prefix is `prefixLength` bytes)
    /// into `buffer`, cleared first. One `inout` access to the connection's buffer for the whole write: each mutating
    /// call on a class's stored property is a dynamic exclusivity check (`swift_beginAccess`, a share of the named
    /// collection's extra cost in ADR 0143's profile).
    private static func writeEngineKey(
        into buffer: inout ByteBuffer, id: UInt32, wire: ByteBufferView, prefixLength length: Int
    ) {
        let prefix = CollectionKey.prefixLength(id)
        buffer.clear(minimumCapacity: 1 + prefix + wire.count - length)
        if length == prefix {
            // The usual case: the marker and the wire key as it came, in one copy.
            let total = 1 + wire.count
            buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: total) { out in
                out[0] = CollectionKey.engineMarker
                wire.withUnsafeBytes { UnsafeMutableRawBufferPointer(rebasing: out[1..<total]).copyMemory(from: $0) }
                return total
            }
        } else {
            // A padded LEB128 prefix: the canonical one written instead.
            buffer.writeInteger(CollectionKey.engineMarker)
            CollectionKey.forEachPrefixByte(id) { buffer.writeInteger($0) }
            buffer.writeBytes(wire.dropFirst(length))
        }
    }

    /// The expiry a mutation of engine key `key` stores (a wire value: 0, relative seconds, or absolute): a named
    /// collection's `maxTTL` gives one to a mutation without and caps a later one (`CollectionTTL`); the default
    /// collection's keys (no marker) pass with one byte compared.
    @inline(__always)
    func expiry(_ wire: UInt32, forKey key: ByteBuffer, bucket: ResolvedBucket) -> UInt32 {
        guard key.readableBytesView.first == CollectionKey.engineMarker else { return wire }
        return namedCollectionExpiry(wire, forKey: key, bucket: bucket)
    }

    private func namedCollectionExpiry(_ wire: UInt32, forKey key: ByteBuffer, bucket: ResolvedBucket) -> UInt32 {
        guard let (id, _) = CollectionKey.decodePrefix(key.readableBytesView.dropFirst()),
            let maxTTL = bucket.collectionsByID[id]?.maxTTL, maxTTL > 0
        else { return wire }
        return CollectionTTL.capped(wire, maxTTL: maxTTL, nowSeconds: node.clock.nowSeconds())
    }

    /// Escapes `frame`'s key (a default-collection key starting with `CollectionKey.engineMarker`, never valid UTF-8
    /// but a valid memcached binary key) in place as `CollectionKey.engineKey` stores it, so it cannot alias a named
    /// collection's engine key. A key past `CollectionKey.maxEscapedDefaultKeyLength` (248 bytes) is refused with
    /// EINVAL and a context (and false returned): its escaped form would pass the engine's 250.
    func escapeDefaultKey(_ frame: inout Frame) -> Bool {
        let key = frame.key.readableBytesView
        guard key.count <= CollectionKey.maxEscapedDefaultKeyLength else {
            emit {
                $0.writeResponse(
                    opcode: frame.opcode, status: .invalidArguments, opaque: frame.opaque, datatype: 1,
                    value: ErrorText.context(
                        "a key starting with byte 0xff may be at most \(CollectionKey.maxEscapedDefaultKeyLength) bytes"
                    ))
            }
            return false
        }
        frame.key = ByteBuffer(
            bytes: CollectionKey.engineKey(collection: CollectionsManifest.defaultCollectionID, logicalKey: key))
        return true
    }

    private func refuseInvalid(_ frame: Frame) {
        emit {
            $0.writeResponse(
                opcode: frame.opcode, status: .invalidArguments, opaque: frame.opaque,
                value: ErrorText.invalidArguments)
        }
    }

    /// The engine key of an OBSERVE entry's key from a collection-aware client, or the status and body to refuse
    /// the request with.
    func observedEngineKey(_ key: [UInt8], bucket: ResolvedBucket) -> Result<[UInt8], ObserveKeyRefusal> {
        guard let (id, length) = CollectionKey.decodePrefix(key), length < key.count else {
            return .failure(ObserveKeyRefusal(status: .invalidArguments, datatype: 0, body: ErrorText.invalidArguments))
        }
        let logical = key[length...]
        if id == CollectionsManifest.defaultCollectionID {
            return Self.observedDefaultKey(logical)
        }
        guard bucket.collectionsByID[id] != nil else {
            return .failure(
                ObserveKeyRefusal(status: .unknownCollection, datatype: 1, body: bucket.manifest.unknownBody))
        }
        guard logical.count <= CollectionKey.maxLogicalKeyLength(collection: id) else {
            return .failure(ObserveKeyRefusal(status: .invalidArguments, datatype: 0, body: ErrorText.invalidArguments))
        }
        return .success(CollectionKey.engineKey(collection: id, logicalKey: logical))
    }

    /// The engine key of a default-collection OBSERVE key (escaped when it starts with the marker), or EINVAL for
    /// an escaped key past `CollectionKey.maxEscapedDefaultKeyLength`.
    static func observedDefaultKey<C: Collection<UInt8>>(_ key: C) -> Result<[UInt8], ObserveKeyRefusal> {
        guard !CollectionKey.needsEscape(defaultKey: key) || key.count <= CollectionKey.maxEscapedDefaultKeyLength
        else {
            return .failure(ObserveKeyRefusal(status: .invalidArguments, datatype: 0, body: ErrorText.invalidArguments))
        }
        return .success(CollectionKey.engineKey(collection: CollectionsManifest.defaultCollectionID, logicalKey: key))
    }

    /// GET_COLLECTIONS_MANIFEST (0xba: the manifest's JSON), GET_COLLECTION_ID (0xbb: `scope.collection` → extras
    /// u64 manifest uid, u32 collection id) and GET_SCOPE_ID (0xbc: `scope` → u64 uid, u32 scope id), from the
    /// selected bucket's manifest. Unknown names answer UNKNOWN_SCOPE (0x8c) / UNKNOWN_COLLECTION (0x88) with
    /// `{"manifest_uid":"<hex>"}`, as kv_engine does.
    func collectionOperation(_ frame: Frame) {
        guard case .ok(let bucket) = currentBucket() else {
            emit { $0.writeResponseHeader(opcode: frame.opcode, status: .noBucket, opaque: frame.opaque) }
            return
        }
        let manifest = bucket.manifest
        // A local user sees the scopes and collections it holds some privilege in, nothing else (ADR 0141).
        let roles: [Role]?
        switch state.principal {
        case .user(_, let r)?: roles = r
        default: roles = nil
        }
        let name = bucket.settings.name
        if frame.opcode == .getCollectionsManifest {
            let json =
                roles.map { roles in
                    manifest.json(
                        showingScope: { roles.sees(bucket: name, scope: $0) },
                        collection: { roles.sees(bucket: name, scope: $0, collection: $1) })
                } ?? manifest.json
            emit {
                $0.writeResponse(opcode: frame.opcode, status: .success, opaque: frame.opaque, datatype: 1, value: json)
            }
            return
        }
        // The path comes in the value (or, from older clients, the key); names are ASCII, so a path longer than a
        // scope and a collection name cannot name anything.
        let raw = frame.value.readableBytes > 0 ? frame.value : frame.key
        guard raw.readableBytes <= 2 * Limits.maxCollectionNameLength + 1 else {
            refuseInvalid(frame)
            return
        }
        let path = String(buffer: raw)
        var resolution =
            frame.opcode == .getScopeID ? manifest.resolveScope(path) : manifest.resolveCollection(path)
        if let roles { resolution = Self.visible(resolution, path: path, to: roles, bucket: name) }
        let id: UInt32
        switch resolution {
        case .collection(_, let collectionID): id = collectionID
        case .scope(let scopeID): id = scopeID
        case .unknownScope, .unknownCollection:
            let status: Status = resolution == .unknownScope ? .unknownScope : .unknownCollection
            emit {
                $0.writeResponse(
                    opcode: frame.opcode, status: status, opaque: frame.opaque, datatype: 1,
                    value: manifest.unknownBody)
            }
            return
        case .invalid:
            refuseInvalid(frame)
            return
        }
        emit {
            $0.writeResponseHeader(opcode: frame.opcode, status: .success, opaque: frame.opaque, extrasLength: 12)
            $0.writeInteger(manifest.uid)
            $0.writeInteger(id)
        }
    }
}

extension KVConnectionHandler {
    /// `resolution` of GET_COLLECTION_ID / GET_SCOPE_ID `path` as a user holding `roles` may learn it: a collection
    /// it holds no privilege in is unknown (UNKNOWN_SCOPE when it sees nothing in the scope either), a scope it
    /// sees nothing in is unknown, as if neither existed (ADR 0141, kv_engine's FailNoPrivileges).
    static func visible(
        _ resolution: CollectionsManifest.Resolution, path: String, to roles: [Role], bucket: String
    ) -> CollectionsManifest.Resolution {
        let parts = path.split(separator: ".", maxSplits: 1, omittingEmptySubsequences: false)
        let scope = parts.first.map { $0.isEmpty ? CollectionsManifest.defaultName : String($0) } ?? ""
        switch resolution {
        case .collection:
            let collection = parts.count > 1 && !parts[1].isEmpty ? String(parts[1]) : CollectionsManifest.defaultName
            if roles.sees(bucket: bucket, scope: scope, collection: collection) { return resolution }
            return roles.sees(bucket: bucket, scope: scope) ? .unknownCollection : .unknownScope
        case .scope:
            return roles.sees(bucket: bucket, scope: scope) ? resolution : .unknownScope
        case .unknownCollection:
            return roles.sees(bucket: bucket, scope: scope) ? resolution : .unknownScope
        default:
            return resolution
        }
    }
}

/// Why a request (an OBSERVE key, or any data request refused by RBAC) is refused: the status, datatype and body
/// of the answer.
struct ObserveKeyRefusal: Error {
    let status: Status
    let datatype: UInt8
    let body: [UInt8]
}

/// A collection's `maxTTL` applied to a mutation's expiry, as kv_engine applies it: a mutation without expiry expires
/// `maxTTL` seconds from now, one expiring later than that is brought forward to it, an earlier one is kept.
enum CollectionTTL {
    /// `wire`: the request's expiry (0 none, up to `Limits.relativeExpiryLimitSeconds` relative seconds, else absolute
    /// Unix seconds); `maxTTL` > 0 seconds; `nowSeconds`: Unix seconds. Returns the expiry to store, absolute when
    /// capped. No trapping arithmetic (u64 sums, clamped back to u32).
    static func capped(_ wire: UInt32, maxTTL: UInt32, nowSeconds: UInt32) -> UInt32 {
        let limit = UInt64(nowSeconds) + UInt64(maxTTL)
        let requested: UInt64
        if wire == 0 {
            requested = limit
        } else if wire <= Limits.relativeExpiryLimitSeconds {
            requested = UInt64(nowSeconds) + UInt64(wire)
        } else {
            requested = UInt64(wire)
        }
        return UInt32(clamping: min(requested, limit))
    }
}
