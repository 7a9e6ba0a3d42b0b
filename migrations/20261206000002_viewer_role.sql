-- The viewer role: an operator who sees what admins see and acts on
-- nothing (every action answers 403).
ALTER TABLE users DROP CONSTRAINT users_role_check;
ALTER TABLE users ADD CONSTRAINT users_role_check CHECK (role IN ('admin', 'member', 'viewer'));
