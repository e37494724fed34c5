"""Media: attachments that come with messages, stored by content, transcribed, shown to the model."""
