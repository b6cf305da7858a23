import Foundation
import NIOCore
import NIOPosix
import NIOSSL
import SetteeLiteListener
import SetteeTLS
import SetteeTestSupport
import Testing

@Suite(.onTestThreads) struct ListenerSupportTests {
    // Proves a QR code encodes (version 3+ for a sync URL), renders to half-block text of the right
    // height, and writes a PNG whose chunks carry valid CRCs and whose zlib stream inflates (checked
    // with Python's zlib, independent of our writer) to the expected pixel count, and that a QR decoder
    // reads the URL back.
    @Test func qrCodeTerminalAndPNG() throws {
        let url = "http://peer-0011223344556677:abcdefghijklmnopqrstuvwx@127.0.0.1:54321/db"
        let qr = try QRCode(url)
        #expect(qr.size >= 29 && qr.size % 4 == 1)
        let text = qr.terminalText()
        #expect(text.split(separator: "\n").count == (qr.size + 4 + 1) / 2)
        let png = qr.png(scale: 3)
        #expect(Array(png.prefix(8)) == [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A])
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent(
            "qr-\(UInt32.random(in: 0...UInt32.max))")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let file = dir.appendingPathComponent("code.png")
        try Data(png).write(to: file)
        let script = """
            import struct, sys, zlib
            d = open(sys.argv[1], 'rb').read()[8:]
            idat = b''
            while d:
                n, = struct.unpack('>I', d[:4]); t = d[4:8]; body = d[8:8+n]; crc, = struct.unpack('>I', d[8+n:12+n])
                assert zlib.crc32(t + body) & 0xffffffff == crc, t
                if t == b'IHDR': w, h = struct.unpack('>II', body[:8])
                if t == b'IDAT': idat += body
                d = d[12+n:]
            raw = zlib.decompress(idat)
            assert len(raw) == h * (w + 1), (len(raw), w, h)
            print(w, h, raw.count(0))
            """
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["python3", "-c", script, file.path]
        let pipe = Pipe()
        process.standardOutput = pipe
        try process.run()
        process.waitUntilExit()
        let out = String(decoding: pipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        #expect(process.terminationStatus == 0)
        let side = (qr.size + 8) * 3
        let dark = qr.modules.joined().filter { $0 }.count * 9
        #expect(out.trimmingCharacters(in: .whitespacesAndNewlines) == "\(side) \(side) \(side + dark)")
        // A real decoder (zbarimg, Debian's zbar-tools) reads the URL back from the PNG.
        let zbar = Process()
        zbar.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        zbar.arguments = ["zbarimg", "--quiet", "--raw", file.path]
        let zbarOut = Pipe()
        zbar.standardOutput = zbarOut
        try zbar.run()
        zbar.waitUntilExit()
        let decoded = String(decoding: zbarOut.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        #expect(decoded.trimmingCharacters(in: .whitespacesAndNewlines) == url)
        #expect(throws: QRCode.EncodingFailed.self) { try QRCode(String(repeating: "x", count: 5000)) }
    }

    // Proves one-time credentials are fresh each time, long enough, and compared exactly.
    @Test func oneTimeCredentials() {
        let a = OneTimeCredentials()
        let b = OneTimeCredentials()
        #expect(a != b && a.password.count == 24 && a.user.hasPrefix("peer-") && a.user.count == 21)
        #expect(a.matches(user: a.user, password: a.password))
        #expect(!a.matches(user: a.user, password: b.password))
        #expect(!a.matches(user: a.user, password: String(a.password.dropLast())))
        #expect(!a.matches(user: b.user, password: a.password))
    }

    // Proves a TLS server with the self-signed identity is reachable only through its pin: fetching the
    // certificate with the right fingerprint succeeds, with another fingerprint it fails.
    @Test func selfSignedIdentityAndPin() async throws {
        let identity = try SelfSignedIdentity()
        #expect(identity.fingerprint.hasPrefix("sha256:") && identity.fingerprint.count == 71)
        let context = try NIOSSLContext(configuration: try identity.serverConfiguration())
        let server = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(NIOSSLServerHandler(context: context))
                }
            }
            .bind(host: "127.0.0.1", port: 0).get()
        defer { server.close(promise: nil) }
        let port = try #require(server.localAddress?.port)
        let cert = try await CertificatePin.fetch(host: "127.0.0.1", port: port, fingerprint: identity.fingerprint)
        #expect(try cert.toDERBytes() == identity.certificateDER)
        let wrong = "sha256:" + String(repeating: "0", count: 64)
        await #expect(throws: CertificatePin.Mismatch.self) {
            _ = try await CertificatePin.fetch(host: "127.0.0.1", port: port, fingerprint: wrong)
        }
    }
}
