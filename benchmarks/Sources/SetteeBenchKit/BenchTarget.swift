/// One system under test: a wire protocol and a loopback address.
///
/// Written on the command line as `memcached-binary=127.0.0.1:11210` or `redis=127.0.0.1:6379`.
/// Only loopback hosts are accepted: this tool never aims load at another machine.
public struct BenchTarget: Sendable, Hashable, Codable, CustomStringConvertible {
    public enum Kind: String, Sendable, Codable, CaseIterable {
        /// memcached binary protocol; the vBucket field carries `VBucketHash` so a settee node accepts it.
        case memcachedBinary = "memcached-binary"
        /// RESP2 GET/SET (Redis and compatible servers).
        case redis
        /// A whole settee cluster through the smart client (`SetteeClient`); the address is any node's admin port.
        case settee
    }

    public var kind: Kind
    public var host: String
    public var port: Int
    /// Optional display name (`name@kind=host:port`), defaults to `kind@port`.
    public var label: String
    /// settee targets: the durability level of every write (`,durability=majority|majorityAndPersistActive|
    /// persistToMajority` after the address); nil = plain writes.
    public var durability: String? = nil
    /// settee targets: the collection every operation names (`,collection=SCOPE.NAME`), through a
    /// `CollectionHandle` on a client with `ClientOptions.collections` (HELLO Collections, every key prefixed with
    /// its LEB128 collection id); nil = the default collection on a client without Collections, as before.
    /// `_default._default` is the default collection on a collection-aware client (keys prefixed with 0x00).
    public var collection: String? = nil

    public init(kind: Kind, host: String, port: Int, label: String? = nil) {
        self.kind = kind
        self.host = host
        self.port = port
        self.label = label ?? "\(kind.rawValue)@\(port)"
    }

    public var description: String { "\(label) (\(kind.rawValue)=\(host):\(port))" }

    public enum ParseError: Error, CustomStringConvertible {
        case malformed(String)
        case notLoopback(String)
        public var description: String {
            switch self {
            case .malformed(let s):
                return
                    "target '\(s)' is not [NAME@]KIND=HOST:PORT[,durability=LEVEL][,collection=SCOPE.NAME] with KIND in "
                    + Kind.allCases.map(\.rawValue).joined(separator: ", ")
            case .notLoopback(let h):
                return "host '\(h)' is not a loopback address; only 127.0.0.0/8, ::1 and localhost are allowed"
            }
        }
    }

    public static let durabilityLevels = ["majority", "majorityAndPersistActive", "persistToMajority"]

    /// Parses `[NAME@]KIND=HOST:PORT[,durability=LEVEL][,collection=SCOPE.NAME]`; both options are for `settee`
    /// targets only.
    public static func parse(_ text: String) throws(ParseError) -> BenchTarget {
        let parts = text.split(separator: ",", omittingEmptySubsequences: false)
        var durability: String? = nil
        var collection: String? = nil
        for option in parts.dropFirst() {
            let kv = option.split(separator: "=", maxSplits: 1).map(String.init)
            guard kv.count == 2 else { throw .malformed(text) }
            switch kv[0] {
            case "durability" where durabilityLevels.contains(kv[1]): durability = kv[1]
            case "collection":
                let path = kv[1].split(separator: ".", omittingEmptySubsequences: false)
                guard path.count == 2, path.allSatisfy({ !$0.isEmpty }) else { throw .malformed(text) }
                collection = kv[1]
            default: throw .malformed(text)
            }
        }
        var target = try parseAddress(String(parts.first ?? ""))
        if (durability != nil || collection != nil) && target.kind != .settee { throw .malformed(text) }
        target.durability = durability
        target.collection = collection
        return target
    }

    static func parseAddress(_ text: String) throws(ParseError) -> BenchTarget {
        var rest = Substring(text)
        var label: String?
        if let at = rest.firstIndex(of: "@"), let eq = rest.firstIndex(of: "="), at < eq {
            label = String(rest[..<at])
            rest = rest[rest.index(after: at)...]
        }
        guard let eq = rest.firstIndex(of: "="), let kind = Kind(rawValue: String(rest[..<eq])) else {
            throw .malformed(text)
        }
        let address = rest[rest.index(after: eq)...]
        guard let colon = address.lastIndex(of: ":"), let port = Int(address[address.index(after: colon)...]),
            (1...65535).contains(port)
        else { throw .malformed(text) }
        var host = String(address[..<colon])
        if host.hasPrefix("[") && host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        guard isLoopback(host) else { throw .notLoopback(host) }
        return BenchTarget(kind: kind, host: host, port: port, label: label)
    }

    static func isLoopback(_ host: String) -> Bool {
        if host == "localhost" || host == "::1" { return true }
        let parts = host.split(separator: ".", omittingEmptySubsequences: false)
        return parts.count == 4 && parts[0] == "127" && parts.allSatisfy { UInt8($0) != nil }
    }
}
