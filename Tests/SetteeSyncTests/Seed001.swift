/// Seed 001's sync function, exactly as its config file has it (between the backquotes, with the
/// config's line breaks and `//` comments).
enum Seed001 {
    static let syncSource = """
         function (doc, oldDoc){
            // Check if doc is being deleted
            if (doc._deleted == undefined) {
                // Validate current version has relevant keys
                validateDocument(doc);
            }
            else {
                // Validate old document has relevant keys
                validateDocument(oldDoc);
            }


            var docOwner = (doc._deleted == undefined) ? doc.owner : oldDoc.owner;

            var publicChannel = "_public";

            var privateChannel = "_"+docOwner;

            // Grant user read access to public channels and user's own channel
            access(docOwner,[publicChannel,privateChannel]);


            // Check if this was a doc update (as opposed to a doc create or delete)
            if (doc._deleted == undefined && oldDoc != null && oldDoc._deleted == undefined) {
                if (doc.tag != oldDoc.tag) {
                     throw({forbidden: "Cannot change tag of document"});

                }
            }


            // Check if new/updated document is tagged as "public"
            var docTag = (doc._deleted == undefined) ? doc.tag : oldDoc.tag;

            if (doc._deleted == undefined) {
                if (docTag == "public") {
                    // All documents tagged public go into "public" channel which to open to all
                    channel(publicChannel);

                }
                else {
                   // Ensure that the owner of document is the user making the request
                   requireUser(docOwner);

                   // All non-public tagged docs go into a user user specific channel
                   channel(privateChannel);

                }
            }
            else {
                channel(doc.channels);
            }


            function validateDocument (doc) {
                // Basic validation of document
                if (!doc.tag ) {
                    // Every doc must include a tag
                    throw({forbidden: "Invalid document type: Tag not provided" + doc.tag});
                }

                if (!doc.owner) {
                    // Every doc must include a owner
                    throw({forbidden: "Invalid document type: Owner not provided" + doc.owner});
                }
            }
        }
        """
}
