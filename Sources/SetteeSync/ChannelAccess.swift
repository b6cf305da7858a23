/// The pure read-access rule (Sync Gateway's `authorizeAnyChannel`).
public enum ChannelAccess {
    /// The channel every user holds from sequence 1: documents in it are public.
    public static let publicChannel = "!"
    /// On a user: every document, including those in no channel. On a document: stored literally.
    public static let star = "*"

    /// Whether a user whose effective channels are `userChannels` may read a revision in `docChannels`:
    /// a user with `*` reads everything, a revision in `!` is readable by everyone, otherwise the sets
    /// must intersect. A revision in no channel is readable only by `*` users (and the admin port).
    public static func canSee(userChannels: Set<String>, docChannels: Set<String>) -> Bool {
        if userChannels.contains(star) || docChannels.contains(publicChannel) { return true }
        if userChannels.count < docChannels.count {
            return userChannels.contains { docChannels.contains($0) }
        }
        return docChannels.contains { userChannels.contains($0) }
    }

    /// `canSee` for a user's TimedSet (channel -> sequence it became visible).
    public static func canSee(userChannels: [String: UInt64], docChannels: Set<String>) -> Bool {
        if userChannels[star] != nil || docChannels.contains(publicChannel) { return true }
        return docChannels.contains { userChannels[$0] != nil }
    }
}
