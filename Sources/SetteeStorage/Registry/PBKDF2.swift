import SetteeAuth

/// The registry's name for the SCRAM hash functions: one type, SetteeAuth's (hash, HMAC, PBKDF2), shared
/// with the KV server's SCRAM exchange.
public typealias ScramAlgorithm = ScramHash
