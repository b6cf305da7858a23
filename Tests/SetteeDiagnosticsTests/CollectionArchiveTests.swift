import Foundation
import SetteeDiagnostics
import SetteeTestSupport
import Testing

/// What a logs collection packs: a tar.gz that the system's `tar` lists and extracts byte for byte, user data hashed
/// with a salted SHA-1, and a bounded ring of recent log lines.
@Suite struct CollectionArchiveTests {
    /// `tar xzf` extracts exactly what was added (names, contents, a file past one 512-byte block).
    @Test func tarGzExtractsWithSystemTar() throws {
        let dir = TemporaryDirectory("targz")
        var archive = TarGzArchive()
        let big = (0..<1300).map { UInt8(truncatingIfNeeded: $0 &* 7) }
        archive.add(name: "collect/a.txt", bytes: Array("hello\n".utf8), mtime: 1_700_000_000)
        archive.add(name: "collect/b.bin", bytes: big)
        let bytes = try #require(archive.gzipped())
        #expect(bytes.prefix(2) == [0x1f, 0x8b])
        #expect(FileManager.default.createFile(atPath: dir.path + "/x.tar.gz", contents: Data(bytes)))
        let tar = Process()
        tar.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        tar.arguments = ["tar", "-xzf", dir.path + "/x.tar.gz", "-C", dir.path]
        try tar.run()
        tar.waitUntilExit()
        #expect(tar.terminationStatus == 0)
        #expect(FileManager.default.contents(atPath: dir.path + "/collect/a.txt") == Data("hello\n".utf8))
        #expect(FileManager.default.contents(atPath: dir.path + "/collect/b.bin") == Data(big))
    }

    /// Every `<ud>` span becomes the salted SHA-1 of its text; the same text gives the same digest, another salt
    /// another one; an unclosed span hides the rest of its line.
    @Test func partialRedactionHashesUserData() {
        let r = UserDataRedaction(salt: "s")
        let out = r.redact("user <ud>ann</ud> read <ud>doc1</ud>; again <ud>ann</ud>\nnext <ud>cut")
        #expect(!out.contains("ann") && !out.contains("doc1") && !out.contains("cut"))
        let digest = r.digest("ann")
        #expect(digest.count == 40)
        #expect(out.components(separatedBy: "<ud>\(digest)</ud>").count == 3)
        #expect(out.hasPrefix("user <ud>") && out.contains("\nnext <ud>"))
        #expect(UserDataRedaction(salt: "t").digest("ann") != digest)
    }

    /// The ring keeps the newest lines, oldest first, never more than its capacity.
    @Test func recentLinesAreBounded() {
        let ring = RecentLogLines(capacity: 3)
        for i in 0..<5 { ring.append("l\(i)") }
        #expect(ring.lines == ["l2", "l3", "l4"])
    }
}
