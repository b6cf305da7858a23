import Foundation
import SetteeCore

/// Client side of SCRAM (RFC 5802), no channel binding: the message arithmetic of one exchange.
/// `SaslClientLogin` drives it for every first-party client. Slow on `receiveServerFirst` (PBKDF2).
public struct ScramClient: Sendable {
    public let hash: ScramHash
    public let username: String
    public let password: String
    public let clientNonce: String
    private var authMessage: [UInt8] = []
    private var serverKey: [UInt8] = []

    public init(hash: ScramHash, username: String, password: String, clientNonce: String) {
        self.hash = hash
        self.username = username
        self.password = password
        self.clientNonce = clientNonce
    }

    private var bare: String {
        let escaped = username.replacingOccurrences(of: "=", with: "=3D").replacingOccurrences(of: ",", with: "=2C")
        return "n=\(escaped),r=\(clientNonce)"
    }

    public var clientFirst: [UInt8] { Array(("n,," + bare).utf8) }

    /// `client-final` for a `server-first`; nil if the server's message is malformed or its nonce
    /// does not extend ours.
    public mutating func receiveServerFirst(_ message: [UInt8]) -> [UInt8]? {
        let text = String(decoding: message, as: UTF8.self)
        var nonce: String?
        var salt: [UInt8]?
        var iterations: Int?
        for attribute in text.split(separator: ",") {
            let value = String(attribute.dropFirst(2))
            switch attribute.prefix(2) {
            case "r=": nonce = value
            case "s=": salt = Base64.decode(value, .strict)
            case "i=": iterations = Int(value)
            default: return nil
            }
        }
        // The server picks the PBKDF2 cost the client pays: a hostile or broken one could ask for billions.
        // The server's part of the nonce must be there: an echo of ours alone would let a recorded exchange replay.
        guard let nonce, nonce.count > clientNonce.count, nonce.hasPrefix(clientNonce), let salt, !salt.isEmpty,
            let iterations,
            (1...Limits.scramClientMaxIterations).contains(iterations)
        else { return nil }
        let salted = hash.saltedPassword(Array(password.utf8), salt: salt, iterations: iterations)
        let clientKey = hash.hmac(key: salted, data: Array("Client Key".utf8))
        let withoutProof = "c=biws,r=\(nonce)"
        authMessage = Array((bare + "," + text + "," + withoutProof).utf8)
        let signature = hash.hmac(key: hash.hash(clientKey), data: authMessage)
        var proof = clientKey
        for i in 0..<proof.count { proof[i] ^= signature[i] }
        serverKey = hash.hmac(key: salted, data: Array("Server Key".utf8))
        return Array((withoutProof + ",p=" + Base64.encode(proof)).utf8)
    }

    /// Whether `server-final` proves the server knew the keys.
    public func verifyServerFinal(_ message: [UInt8]) -> Bool {
        let text = String(decoding: message, as: UTF8.self)
        guard text.hasPrefix("v="), let v = Base64.decode(String(text.dropFirst(2)), .strict) else { return false }
        return constantTimeEqual(v, hash.hmac(key: serverKey, data: authMessage))
    }
}
