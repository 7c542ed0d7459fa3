-- When the session's answers are also spoken, as `/voice` chose: 'off',
-- 'auto' (a voice note is answered with one) or 'always'. NULL: the
-- config's `voice.reply` decides.
ALTER TABLE sessions ADD COLUMN voice TEXT;
