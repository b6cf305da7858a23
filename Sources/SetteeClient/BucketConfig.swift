import SetteeClusterMap
import SetteeCore
import SetteeJSON

/// Where a node's KV and admin services listen, as a config names it.
public struct NodeAddress: Hashable, Sendable, CustomStringConvertible {
    public var host: String
    public var port: Int
    public init(host: String, port: Int) {
        self.host = host
        self.port = port
    }
    public var description: String { hostPort(host, port) }
}

/// One entry of `nodesExt` (or of the legacy `serverList`), with `$HOST` already substituted.
public struct ConfigNode: Hashable, Sendable {
    /// The KV (memcached-binary) address; nil for a node without the `kv` service.
    public var kv: NodeAddress?
    /// The admin (`mgmt`) address, when advertised.
    public var mgmt: NodeAddress?
    /// The KV TLS (`kvSSL`) and admin HTTPS (`mgmtSSL`) addresses, when advertised.
    public var kvTLS: NodeAddress?
    public var mgmtTLS: NodeAddress?
    public init(kv: NodeAddress?, mgmt: NodeAddress?, kvTLS: NodeAddress? = nil, mgmtTLS: NodeAddress? = nil) {
        self.kv = kv
        self.mgmt = mgmt
        self.kvTLS = kvTLS
        self.mgmtTLS = mgmtTLS
    }
}

/// Why a config document was refused.
public struct ConfigError: Error, Equatable, Sendable, CustomStringConvertible {
    public var reason: String
    public init(_ reason: String) { self.reason = reason }
    public var description: String { "invalid bucket config: \(reason)" }
}

/// The parts of Couchbase's terse bucket config a client routes by: revision, nodes in map-index
/// order, and the vBucket map. Parsed defensively (it comes off the network): nothing here traps.
///
/// Invariants after `parse`: every chain has `numReplicas + 1` entries; every index is -1 or indexes
/// `nodes`; `chains.count` is a power of two between 1 and `ClientLimits.maxConfigVBuckets` (the hash relies on it).
public struct BucketConfig: Sendable, Equatable {
    public var revision: MapRevision
    public var bucket: String?
    public var nodes: [ConfigNode]
    public var numReplicas: Int
    /// `[active, replica...]` node indexes per vBucket; -1 for none.
    public var chains: [[Int16]]

    public init(revision: MapRevision, bucket: String?, nodes: [ConfigNode], numReplicas: Int, chains: [[Int16]]) {
        self.revision = revision
        self.bucket = bucket
        self.nodes = nodes
        self.numReplicas = numReplicas
        self.chains = chains
    }

    public var numVBuckets: Int { chains.count }

    /// Whether `self` should replace `current`: only when strictly newer in `(revEpoch, rev)` and with the
    /// same vBucket count (an SDK ignores a config whose count changed).
    public func isNewer(than current: BucketConfig?) -> Bool {
        guard let current else { return true }
        return revision > current.revision && numVBuckets == current.numVBuckets
    }

    /// The config a TLS client routes by: each node's `kv`/`mgmt` become its TLS addresses. A node that
    /// advertises none gets none (its vBuckets are unreachable over TLS), never its plain port.
    public func usingTLSPorts() -> BucketConfig {
        var copy = self
        copy.nodes = nodes.map { ConfigNode(kv: $0.kvTLS, mgmt: $0.mgmtTLS, kvTLS: $0.kvTLS, mgmtTLS: $0.mgmtTLS) }
        return copy
    }

    /// The vBucket of `key`.
    @inlinable
    public func vbucket<C: Collection>(forKey key: C) -> VBucketID where C.Element == UInt8 {
        VBucketHash.vbucket(forKey: key, count: chains.count)
    }

    /// The node index holding the active copy of `vbucket`, nil when there is none.
    public func activeNode(of vbucket: VBucketID) -> Int? {
        guard vbucket.index < chains.count else { return nil }
        let n = Int(chains[vbucket.index][0])
        return n >= 0 && n < nodes.count && nodes[n].kv != nil ? n : nil
    }

    /// The KV address that owns `key` now, with its vBucket.
    public func route<C: Collection>(key: C) -> (VBucketID, NodeAddress?) where C.Element == UInt8 {
        let vb = vbucket(forKey: key)
        return (vb, activeNode(of: vb).flatMap { nodes[$0].kv })
    }

    /// Active vBuckets per node index.
    public func activeCounts() -> [Int] {
        var counts = [Int](repeating: 0, count: nodes.count)
        for chain in chains where chain[0] >= 0 && Int(chain[0]) < nodes.count { counts[Int(chain[0])] += 1 }
        return counts
    }

    /// Replica vBuckets per node index.
    public func replicaCounts() -> [Int] {
        var counts = [Int](repeating: 0, count: nodes.count)
        for chain in chains {
            for n in chain.dropFirst() where n >= 0 && Int(n) < nodes.count { counts[Int(n)] += 1 }
        }
        return counts
    }

    /// Parses a terse bucket config (`GET /pools/default/b/NAME`, GET_CLUSTER_CONFIG, NOT_MY_VBUCKET
    /// body). `sourceHost` replaces `$HOST` and missing hostnames: the host the document came from.
    public static func parse<C: Collection>(_ bytes: C, sourceHost: String) throws(ConfigError) -> BucketConfig
    where C.Element == UInt8 {
        let json: JSON
        do { json = try JSON.parse(bytes) } catch { throw ConfigError(error.description) }
        return try parse(json, sourceHost: sourceHost)
    }

    public static func parse(_ json: JSON, sourceHost: String) throws(ConfigError) -> BucketConfig {
        guard json.objectValue != nil else { throw ConfigError("not an object") }
        // A missing rev/revEpoch sorts lowest, as in the SDK.
        let rev = json["rev"]?.int64Value ?? -1
        let epoch = json["revEpoch"]?.int64Value ?? -1
        guard let server = json["vBucketServerMap"], let rawMap = server["vBucketMap"]?.arrayValue else {
            throw ConfigError("no vBucketServerMap.vBucketMap")
        }
        let numReplicas = server["numReplicas"]?.intValue ?? 0
        guard (0...3).contains(numReplicas) else { throw ConfigError("numReplicas \(numReplicas)") }
        let count = rawMap.count
        guard count > 0, count <= ClientLimits.maxConfigVBuckets, count & (count - 1) == 0 else {
            throw ConfigError("vBucket count \(count) is not a power of two in 1...\(ClientLimits.maxConfigVBuckets)")
        }

        var nodes: [ConfigNode] = []
        if let ext = json["nodesExt"]?.arrayValue {
            for entry in ext {
                guard let services = entry["services"] else { throw ConfigError("nodesExt entry without services") }
                var host = entry["hostname"]?.stringValue ?? ""
                if host.isEmpty || host == "$HOST" { host = sourceHost }
                let kv = services["kv"]?.intValue.map { NodeAddress(host: host, port: $0) }
                let mgmt = services["mgmt"]?.intValue.map { NodeAddress(host: host, port: $0) }
                let kvTLS = services["kvSSL"]?.intValue.map { NodeAddress(host: host, port: $0) }
                let mgmtTLS = services["mgmtSSL"]?.intValue.map { NodeAddress(host: host, port: $0) }
                nodes.append(ConfigNode(kv: kv, mgmt: mgmt, kvTLS: kvTLS, mgmtTLS: mgmtTLS))
            }
        } else if let list = server["serverList"]?.arrayValue {
            for item in list {
                guard let s = item.stringValue, let addr = splitHostPort(s) else {
                    throw ConfigError("bad serverList entry")
                }
                let host = addr.host == "$HOST" ? sourceHost : addr.host
                nodes.append(ConfigNode(kv: NodeAddress(host: host, port: addr.port), mgmt: nil))
            }
        } else {
            throw ConfigError("neither nodesExt nor serverList")
        }
        // A cluster has at most maxClusterMembers nodes: a longer list is not one (and each index is kept as an
        // Int16, which 32,768 nodes would overflow).
        guard nodes.count <= Limits.maxClusterMembers else {
            throw ConfigError("\(nodes.count) nodes; a cluster has at most \(Limits.maxClusterMembers)")
        }

        var chains: [[Int16]] = []
        chains.reserveCapacity(count)
        for (vb, raw) in rawMap.enumerated() {
            guard let items = raw.arrayValue, items.count == numReplicas + 1 else {
                throw ConfigError("vb \(vb): chain length is not numReplicas + 1")
            }
            var chain: [Int16] = []
            chain.reserveCapacity(items.count)
            for item in items {
                guard let n = item.intValue, n >= -1, n < nodes.count, let index = Int16(exactly: n) else {
                    throw ConfigError("vb \(vb): node index out of range")
                }
                chain.append(index)
            }
            chains.append(chain)
        }
        return BucketConfig(
            revision: MapRevision(epoch: epoch, rev: rev), bucket: json["name"]?.stringValue, nodes: nodes,
            numReplicas: numReplicas, chains: chains)
    }
}

/// Splits `host:port` or `[v6]:port`.
public func splitHostPort(_ s: String) -> NodeAddress? {
    if s.hasPrefix("["), let close = s.firstIndex(of: "]") {
        let host = String(s[s.index(after: s.startIndex)..<close])
        let rest = s[s.index(after: close)...]
        guard rest.hasPrefix(":"), let port = Int(rest.dropFirst()), (1...65535).contains(port) else { return nil }
        return NodeAddress(host: host, port: port)
    }
    guard let colon = s.lastIndex(of: ":"), let port = Int(s[s.index(after: colon)...]), (1...65535).contains(port)
    else { return nil }
    return NodeAddress(host: String(s[..<colon]), port: port)
}
