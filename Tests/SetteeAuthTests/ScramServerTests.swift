import SetteeAuth
import SetteeCore
import Testing

/// Vectors captured from the official Couchbase SDK logging in to a real server (accepted live by the SDK).
struct ScramVector {
    let hash: ScramHash
    let proof: String
    let verifier: String
}

let clientNonce = "0x01 0x02 0xffffff83 0x7f"
let serverNonce = "3c5f0a9e1b2d4f60"
let salt: [UInt8] = Array(0...15)
let vectors = [
    ScramVector(
        hash: .sha512,
        proof: "f/k8VaCwo1dvgdU0llnVmrfAIBbxFe3QCD7yvW06i/3RU29uioThvqpLu5cPil1lUTD1MuW4dTexyw0oT4zsSA==",
        verifier: "GG6JyZSmwIWmxmEsklTFR5tcO2K7cOfKSszspREcFPdMhic/riJsXKk9NB3dQH7KWi2ueM5L28+W9xYDEenYFA=="),
    ScramVector(
        hash: .sha256, proof: "/3pcWQcVH88+MQ2bmiEp6AVjbbAUv5wMraSTGzfAWrg=",
        verifier: "SSWunC3SsBbcpZVLznhD/eCZG8OTnfDsh1gmlCrImto="),
    ScramVector(hash: .sha1, proof: "F/Hcn0IddXTxyJMdETLZ4fmNZO8=", verifier: "/DzIcuV6MIC/XtW671z8+N7I+ys="),
]

func keys(_ hash: ScramHash, password: String = "password") -> ScramKeys {
    ScramKeys.derive(password: password, salt: salt, iterations: 4096, hash: hash)
}

let decoy = ScramKeys(salt: Array(repeating: 7, count: 16), iterations: 4096, storedKey: [], serverKey: [])

@Test(arguments: vectors)
func serverAcceptsTheSDKsProofAndSignsLikeCouchbase(_ v: ScramVector) {
    // Proves the server reproduces the exact server-first and server-final the real SDK accepted, for
    // all three mechanisms, including the C++ client's nonce with spaces and "0x" tokens.
    var server = ScramServer(hash: v.hash)
    let first = server.receiveClientFirst(
        Array("n,,n=Administrator,r=\(clientNonce)".utf8), keys: keys(v.hash), decoy: decoy, serverNonce: serverNonce)
    #expect(first == .challenge(Array("r=\(clientNonce)\(serverNonce),s=AAECAwQFBgcICQoLDA0ODw==,i=4096".utf8)))
    let final = server.receiveClientFinal(Array("c=biws,r=\(clientNonce)\(serverNonce),p=\(v.proof)".utf8))
    #expect(final == .success(username: "Administrator", serverFinal: Array("v=\(v.verifier)".utf8)))
}

@Test(arguments: ScramHash.allCases)
func clientAndServerAgreeAndWrongPasswordFails(_ hash: ScramHash) {
    // Proves a full exchange with the library's client succeeds (and the client verifies v=), while
    // the same exchange with a wrong password ends in invalidProof.
    for (password, shouldPass) in [("password", true), ("passw0rd", false)] {
        var client = ScramClient(hash: hash, username: "a,b=c", password: password, clientNonce: "abc def")
        var server = ScramServer(hash: hash)
        #expect(ScramServer.username(inClientFirst: client.clientFirst) == "a,b=c")
        guard
            case .challenge(let serverFirst) = server.receiveClientFirst(
                client.clientFirst, keys: keys(hash), decoy: decoy, serverNonce: "xyz")
        else {
            Issue.record("no challenge")
            return
        }
        guard let clientFinal = client.receiveServerFirst(serverFirst) else {
            Issue.record("client rejected server-first")
            return
        }
        switch server.receiveClientFinal(clientFinal) {
        case .success(let user, let serverFinal):
            #expect(shouldPass)
            #expect(user == "a,b=c")
            #expect(client.verifyServerFinal(serverFinal))
        case .failure(let f):
            #expect(!shouldPass)
            #expect(f == .invalidProof)
        case .challenge:
            Issue.record("unexpected second challenge")
        }
    }
}

@Test func unknownUserGetsADecoyChallengeAndFails() {
    // Proves an unknown user is challenged with the decoy salt (no user enumeration) and can never pass.
    var client = ScramClient(hash: .sha512, username: "ghost", password: "password", clientNonce: "n1")
    var server = ScramServer(hash: .sha512)
    let decoyKeys = ScramKeys.derive(password: "password", salt: decoy.salt, iterations: 4096, hash: .sha512)
    guard
        case .challenge(let serverFirst) = server.receiveClientFirst(
            client.clientFirst, keys: nil, decoy: decoyKeys, serverNonce: "s1")
    else {
        Issue.record("no challenge")
        return
    }
    #expect(String(decoding: serverFirst, as: UTF8.self).contains("s=BwcHBwcHBwcHBwcHBwcHBw=="))
    let final = client.receiveServerFirst(serverFirst)!
    #expect(server.receiveClientFinal(final) == .failure(.invalidProof))
}

@Test func malformedAndReplayedMessagesFail() {
    // Proves malformed client-first variants, a changed nonce, channel binding and out-of-order
    // messages are refused.
    for bad in ["", "n,,r=abc", "n,,n=,r=abc", "x,,n=u,r=abc", "n,,n=u=2X,r=abc", "n,,m=ext,n=u,r=abc", "n,,n=u,r="] {
        var s = ScramServer(hash: .sha256)
        if case .challenge = s.receiveClientFirst(Array(bad.utf8), keys: keys(.sha256), decoy: decoy, serverNonce: "s")
        {
            Issue.record("accepted \(bad)")
        }
    }
    var cb = ScramServer(hash: .sha256)
    #expect(
        cb.receiveClientFirst(Array("p=tls-unique,,n=u,r=a".utf8), keys: nil, decoy: decoy, serverNonce: "s")
            == .failure(.channelBindingUnsupported))
    var s = ScramServer(hash: .sha256)
    #expect(s.receiveClientFinal(Array("c=biws,r=a,p=AA==".utf8)) == .failure(.unexpectedMessage))
    var t = ScramServer(hash: .sha256)
    _ = t.receiveClientFirst(Array("n,,n=u,r=abc".utf8), keys: keys(.sha256), decoy: decoy, serverNonce: "s")
    #expect(t.receiveClientFinal(Array("c=biws,r=abcX,p=AAAA".utf8)) == .failure(.nonceMismatch))
}

/// Proves the client refuses a server-first whose iteration count it would not pay (a hostile server asking for
/// 2^31 PBKDF2 rounds made it spin), and still answers an ordinary one.
@Test func clientRefusesAnAbsurdIterationCount() {
    var client = ScramClient(hash: .sha512, username: "u", password: "password", clientNonce: "abc")
    #expect(client.receiveServerFirst(Array("r=abcdef,s=QUJDRA==,i=2147483647".utf8)) == nil)
    var ordinary = ScramClient(hash: .sha512, username: "u", password: "password", clientNonce: "abc")
    #expect(ordinary.receiveServerFirst(Array("r=abcdef,s=QUJDRA==,i=4096".utf8)) != nil)
}

/// Proves client messages past `Limits.scramMaxClientMessageBytes` fail as malformed ones do, before parsing, so an
/// exchange never keeps a frame's worth of client-first until SASL_STEP: a client-first one byte over the bound (a
/// long nonce) gives no user name and no challenge, one at the bound is challenged, and a client-final over the
/// bound fails the challenged exchange; an SDK-sized exchange is far below it.
@Test func clientMessagesPastTheBoundFail() {
    let bound = Limits.scramMaxClientMessageBytes
    let head = "n,,n=Administrator,r="
    let atBound = Array((head + String(repeating: "a", count: bound - head.utf8.count)).utf8)
    let over = atBound + Array("a".utf8)
    #expect(ScramServer.username(inClientFirst: over) == nil)
    var refused = ScramServer(hash: .sha512)
    guard
        case .failure(.malformed) = refused.receiveClientFirst(
            over, keys: keys(.sha512), decoy: decoy, serverNonce: "s")
    else {
        Issue.record("a client-first of \(over.count) bytes was challenged")
        return
    }
    #expect(ScramServer.username(inClientFirst: atBound) == "Administrator")
    var s = ScramServer(hash: .sha512)
    guard case .challenge = s.receiveClientFirst(atBound, keys: keys(.sha512), decoy: decoy, serverNonce: "s") else {
        Issue.record("a client-first at the bound was refused")
        return
    }
    let final = Array("c=biws,r=\(String(repeating: "a", count: bound - head.utf8.count))s,p=".utf8)
    let longFinal = final + Array(repeating: UInt8(ascii: "A"), count: bound + 1 - final.count)
    guard case .failure(.malformed) = s.receiveClientFinal(longFinal) else {
        Issue.record("a client-final of \(longFinal.count) bytes was checked")
        return
    }
    let client = ScramClient(
        hash: .sha512, username: String(repeating: "u", count: 128), password: "p", clientNonce: "n")
    #expect(client.clientFirst.count < bound / 4)
}
