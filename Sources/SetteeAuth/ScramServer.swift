import Foundation
import SetteeCore

/// Server side of one SCRAM exchange (RFC 5802, RFC 7677), without channel binding, as Couchbase's
/// SASL_AUTH / SASL_STEP carry it. Pure: the caller supplies the server nonce and the user's stored
/// keys; no I/O, no clock, no randomness.
///
/// States and events:
/// ```
///   start ──clientFirst(ok)──▶ challenged ──clientFinal(proof ok)──▶ succeeded
///     │                           │
///     └──malformed──▶ failed ◀────┴──malformed / wrong nonce / bad proof
/// ```
/// Invariants:
/// 1. `succeeded` is reached only when `H(proof XOR HMAC(StoredKey, AuthMessage)) == StoredKey`,
///    compared in constant time, and the final message echoes exactly the nonce the server sent.
/// 2. An unknown user is challenged like a known one (with `decoy` keys the caller derives from the
///    name), so the reply does not tell which user names exist; its proof can never verify.
/// 3. Every event after `succeeded` or `failed` fails: one exchange per instance.
/// 4. A client message longer than `Limits.scramMaxClientMessageBytes` fails the exchange unparsed, so what a
///    `challenged` exchange keeps (client-first-bare, the nonce, server-first) is bounded.
public struct ScramServer: Sendable {
    public enum Failure: Error, Equatable, Sendable {
        case malformed(String)
        case channelBindingUnsupported
        case nonceMismatch
        case invalidProof
        case unexpectedMessage
    }

    /// What the transport should send next.
    public enum Reply: Equatable, Sendable {
        /// Send `server-first` with AUTH_CONTINUE and wait for `client-final`.
        case challenge([UInt8])
        /// Authenticated as `username`: send `server-final` (`v=...`) with success.
        case success(username: String, serverFinal: [UInt8])
        /// Refuse (AUTH_ERROR).
        case failure(Failure)
    }

    private enum State: Sendable {
        case start
        case challenged(Challenge)
        case succeeded
        case failed
    }

    private struct Challenge: Sendable {
        var username: String
        var keys: ScramKeys
        /// Further keys with the same salt and iterations that a proof may match (a rotated secret's previous
        /// value during its grace period).
        var alsoAccept: [ScramKeys]
        var known: Bool
        var gs2Header: String
        var nonce: String
        var clientFirstBare: String
        var serverFirst: String
    }

    public let hash: ScramHash
    private var state = State.start

    public init(hash: ScramHash) { self.hash = hash }

    /// The user named in a `client-first` message, or nil if it is malformed: lets the caller fetch
    /// the stored keys before `receiveClientFirst`.
    public static func username(inClientFirst message: [UInt8]) -> String? {
        guard message.count <= Limits.scramMaxClientMessageBytes else { return nil }
        return try? parseClientFirst(String(decoding: message, as: UTF8.self)).username
    }

    /// Handles `client-first`. `keys` are the user's stored keys, or nil for an unknown user, in which
    /// case `decoy` keys (same shape, derived by the caller from the name) make the challenge look real.
    /// `alsoAccept` are keys of another password of the same user that a proof may match too; only those with
    /// `keys`' salt and iteration count can (the client derives its proof from the challenge's).
    public mutating func receiveClientFirst(
        _ message: [UInt8], keys: ScramKeys?, decoy: ScramKeys, serverNonce: String, alsoAccept: [ScramKeys] = []
    ) -> Reply {
        guard case .start = state else { return fail(.unexpectedMessage) }
        guard message.count <= Limits.scramMaxClientMessageBytes else {
            return fail(.malformed("client-first longer than \(Limits.scramMaxClientMessageBytes) bytes"))
        }
        let parsed: (gs2: String, username: String, nonce: String, bare: String)
        do { parsed = try Self.parseClientFirst(String(decoding: message, as: UTF8.self)) } catch {
            return fail(error)
        }
        let used = keys ?? decoy
        let nonce = parsed.nonce + serverNonce
        let serverFirst = "r=\(nonce),s=\(Base64.encode(used.salt)),i=\(used.iterations)"
        state = .challenged(
            Challenge(
                username: parsed.username, keys: used,
                alsoAccept: keys == nil
                    ? [] : alsoAccept.filter { $0.salt == used.salt && $0.iterations == used.iterations },
                known: keys != nil, gs2Header: parsed.gs2, nonce: nonce,
                clientFirstBare: parsed.bare, serverFirst: serverFirst))
        return .challenge(Array(serverFirst.utf8))
    }

    /// Handles `client-final`: checks the channel-binding echo, the nonce and the proof.
    public mutating func receiveClientFinal(_ message: [UInt8]) -> Reply {
        guard case .challenged(let ch) = state else { return fail(.unexpectedMessage) }
        guard message.count <= Limits.scramMaxClientMessageBytes else {
            return fail(.malformed("client-final longer than \(Limits.scramMaxClientMessageBytes) bytes"))
        }
        let text = String(decoding: message, as: UTF8.self)
        guard let proofRange = text.range(of: ",p=", options: .backwards) else {
            return fail(.malformed("client-final without proof"))
        }
        let withoutProof = String(text[..<proofRange.lowerBound])
        let proofText = String(text[proofRange.upperBound...])
        guard withoutProof.hasPrefix("c=") else { return fail(.malformed("client-final without c=")) }
        let afterC = withoutProof.dropFirst(2)
        guard let comma = afterC.firstIndex(of: ",") else { return fail(.malformed("client-final without r=")) }
        let cbind = String(afterC[..<comma])
        guard let cbindBytes = Base64.decode(cbind, .strict),
            String(decoding: cbindBytes, as: UTF8.self) == ch.gs2Header
        else { return fail(.malformed("channel binding does not echo the GS2 header")) }
        let rest = afterC[afterC.index(after: comma)...]
        guard rest.hasPrefix("r=") else { return fail(.malformed("client-final without r=")) }
        // The nonce runs to the next attribute; the Couchbase C++ client's nonce contains spaces but no commas.
        let nonce = rest.dropFirst(2).split(separator: ",", maxSplits: 1, omittingEmptySubsequences: false)[0]
        guard constantTimeEqual(Array(nonce.utf8), Array(ch.nonce.utf8)) else { return fail(.nonceMismatch) }
        guard let proof = Base64.decode(proofText, .strict), proof.count == hash.digestLength else {
            return fail(.malformed("proof is not base64 of the digest length"))
        }
        let authMessage = Array((ch.clientFirstBare + "," + ch.serverFirst + "," + withoutProof).utf8)
        var matched: ScramKeys?
        for keys in [ch.keys] + ch.alsoAccept {
            let clientSignature = hash.hmac(key: keys.storedKey, data: authMessage)
            var clientKey = proof
            for i in 0..<clientKey.count { clientKey[i] ^= clientSignature[i] }
            if constantTimeEqual(hash.hash(clientKey), keys.storedKey) && matched == nil { matched = keys }
        }
        guard let matched, ch.known else { return fail(.invalidProof) }
        let serverSignature = hash.hmac(key: matched.serverKey, data: authMessage)
        state = .succeeded
        return .success(
            username: ch.username, serverFinal: Array(("v=" + Base64.encode(serverSignature)).utf8))
    }

    private mutating func fail(_ f: Failure) -> Reply {
        state = .failed
        return .failure(f)
    }

    /// `gs2-header client-first-bare`: `n,[a=authzid],n=user,r=nonce[,ext...]`.
    static func parseClientFirst(
        _ text: String
    ) throws(Failure) -> (gs2: String, username: String, nonce: String, bare: String) {
        let parts = text.split(separator: ",", maxSplits: 2, omittingEmptySubsequences: false)
        guard parts.count == 3 else { throw .malformed("client-first has no GS2 header") }
        switch parts[0] {
        case "n", "y": break
        case let flag where flag.hasPrefix("p="): throw .channelBindingUnsupported
        default: throw .malformed("bad GS2 channel-binding flag")
        }
        if !parts[1].isEmpty && !parts[1].hasPrefix("a=") { throw .malformed("bad GS2 authzid") }
        let gs2 = "\(parts[0]),\(parts[1]),"
        let bare = String(parts[2])
        if bare.hasPrefix("m=") { throw .malformed("mandatory extensions are not supported") }
        let attributes = bare.split(separator: ",", omittingEmptySubsequences: false)
        guard attributes.count >= 2, attributes[0].hasPrefix("n="), attributes[1].hasPrefix("r="),
            attributes[1].count > 2
        else { throw .malformed("client-first-bare needs n= then r=") }
        guard let username = unescape(attributes[0].dropFirst(2)), !username.isEmpty else {
            throw .malformed("bad saslname")
        }
        return (gs2, username, String(attributes[1].dropFirst(2)), bare)
    }

    /// RFC 5802 saslname: `=2C` is `,` and `=3D` is `=`; any other `=` is an error.
    static func unescape(_ s: Substring) -> String? {
        guard s.contains("=") else { return String(s) }
        var out = ""
        var i = s.startIndex
        while i < s.endIndex {
            if s[i] == "=" {
                let code = s[s.index(after: i)...].prefix(2)
                switch code {
                case "2C": out.append(",")
                case "3D": out.append("=")
                default: return nil
                }
                i = s.index(i, offsetBy: 3)
            } else {
                out.append(s[i])
                i = s.index(after: i)
            }
        }
        return out
    }
}
